"""ingest: a job's events, coverage and kept evidence into the store, then its verdict from everything stored.

Evidence arrives in pieces and late (docs/architecture.md): each piece is stored in its own transaction under the
job's lock and the job re-attributed; attributing is coalesced, so a thousand pieces cost a few attributions.
"""

from __future__ import annotations

from pathlib import Path

from attribution.correlate.rootcause import correlate
from attribution.model import Coverage, Event, ExecutionContext
from attribution.pipeline.diagnose import Diagnosis, diagnose_bundle
from attribution.rulepack.values import RuleSet
from attribution.scope.bundle import check_storable


def ingest(ruleset: RuleSet, engine, ctx: ExecutionContext, events: list[Event], coverage: list[Coverage],
           source: str, deadline: float | None = None, telemetry=None, evidence: dict | None = None,
           evidence_piece: dict | None = None, attribute: bool = True):
    """Store a job's events and coverage, then re-attribute the job from everything stored for it.

    Idempotent: the same input twice adds no event and no verdict. Any number of processes may ingest pieces
    of one job concurrently (node epilogs, the controller). Storing is one transaction per piece under the
    job's lock, counting the job's evidence (jobs.evidence_seq); attributing is coalesced: one process at a
    time computes the verdict and records the count it read before the evidence (attributed_seq), the others
    return (verdict None). The attributor looks again after it commits, so the last verdict is always that of
    the whole evidence, while a thousand pieces cost a few attributions instead of a thousand.

    `evidence`: the whole job's lines kept for replay (a bundle's), replacing what is kept; `evidence_piece`: one
    reporter's (a node agent's, serialize.evidence_from_json), merged into the job's with `telemetry`
    (replay.keep.merge_piece: that reporter's earlier piece replaced, the union kept, bounded per job).

    `attribute` False stores the piece and leaves the job pending for whoever the caller knows comes next (the
    service, when more reports of this job are queued behind this one: the last of them attributes the whole
    evidence); the verdict returned is then None, as when another process is attributing.
    """
    from attribution.drain.life import from_evidence as life_of_evidence
    from attribution.reports.render import verdict_to_dict
    from attribution.store import in_transaction
    from attribution.store.node_life import record_changes
    from attribution.store.recurrence import render_with_recurrence
    from attribution.store.writer import IngestResult, JobSession

    inside, outside = split_by_window(ruleset, ctx, events)
    life, inside, outside = life_of_evidence(ruleset, ctx, inside, outside)  # boots: the node's life, not events

    def store(conn):
        def ahead(session, batch):
            # alone: store and attribute in one transaction; a job new with this piece gets its verdict
            # correlated from the events in hand while the server stores them (used only if every one of them
            # was new to the store, JobEvents.fresh)
            if attribute and not session.contended and session.claim_attribution():
                return True, session.attribute_ahead(ruleset, correlate, verdict_to_dict, batch)
            return False, None

        s, new, linked, (alone, early) = store_piece(conn, ctx, inside, outside, coverage, source, telemetry,
                                                     evidence, evidence_piece, ahead=ahead)
        if life:
            record_changes(conn, ctx.cluster, life)
        done = None
        if alone:
            done = s.attribute(ruleset, correlate, render_with_recurrence(conn, s.job.id, ctx, verdict_to_dict),
                               early)
        return s.job, new, linked, done

    job, new, linked, done = in_transaction(engine, store, deadline=deadline)
    if done is not None:  # stored and attributed at once; whoever stores after this commit attributes again
        vid, changed, verdict = done
        return IngestResult(job, new, linked, vid, changed), verdict
    # others were storing this job too: attribute now unless one of them is at it (it will look again)
    again = attribute_pending(ruleset, engine, ctx, job, deadline, known_pending=True) if attribute else None
    if again is not None:
        return IngestResult(job, new, linked, again[0], again[1]), again[2]
    vid = in_transaction(engine, lambda c: JobSession(c, ctx, source, job=job).current_verdict_id(),
                         deadline=deadline)
    return IngestResult(job, new, linked, vid, False), None


def split_by_window(ruleset: RuleSet, ctx: ExecutionContext, events: list[Event]) -> tuple[list, list]:
    """(events inside the job's window, the rest) after the checks every stored report passes: storable names,
    user-written times far outside the job untimestamped (reports from nodes and the API too)."""
    from attribution.correlate.rootcause import in_window, job_window
    from attribution.extract.events import untrusted_time_dropped

    check_storable(ctx, {e.node for e in events})
    lo, hi = job_window(ctx, ruleset.graph)
    events = [untrusted_time_dropped(e, lo, hi) for e in events]
    return [e for e in events if in_window(e, lo, hi)], [e for e in events if not in_window(e, lo, hi)]


def store_piece(conn, ctx: ExecutionContext, inside: list[Event], outside: list[Event], coverage: list[Coverage],
                source: str, telemetry=None, evidence: dict | None = None, evidence_piece: dict | None = None,
                ahead=None):
    """One report's writes in the caller's transaction, the job marked pending; (JobSession, new, linked, what
    `ahead` returned). `ahead(session, batch)`: called once the job is marked pending and its events' batch is
    built, before they are stored (ingest claims the attribution there and correlates a new job meanwhile)."""
    from attribution.store.writer import JobSession

    s = JobSession(conn, ctx, source)
    s.set_coverage(coverage)
    if telemetry:  # {node: (prolog, epilog)} counter snapshots: their absolute values, for the fleet views
        s.set_counters(telemetry)
    if evidence is not None:  # the lines kept for replay (docs/replay.md), with the events they gave
        from attribution.store.evidence import save_evidence

        save_evidence(conn, s.job.job_id, s.job.id, evidence)
    elif evidence_piece is not None:
        merge_evidence_piece(conn, s.job, source, evidence_piece, telemetry)
    s.mark_pending()
    batch = s.batch(inside)
    early = ahead(s, batch) if ahead is not None else None
    new, linked = s.add_events(inside, batch=batch)
    new += s.add_events(outside, link=False)[0]
    return s, new, linked, early


def merge_evidence_piece(conn, job, source: str, piece: dict, telemetry=None) -> None:
    """Store one reporter's kept lines and its counter snapshots as its piece of the job's kept evidence (under
    the job's lock, in the transaction that stores its events; store.evidence.save_piece: the job's other
    pieces are not read). The reporter is `source/reporter` (`node/g01`)."""
    from attribution.replay.keep import keep_telemetry
    from attribution.store.evidence import save_piece

    key = f"{source}/{piece.get('reporter') or ''}"
    save_piece(conn, job.job_id, job.id, key, dict(piece) | keep_telemetry(telemetry or {}))


def attribute_pending(ruleset: RuleSet, engine, ctx: ExecutionContext, job, deadline: float | None = None,
                      known_pending: bool = False):
    """Attribute the job while evidence is pending and nobody else is attributing it. Returns the last
    (verdict id, whether any verdict changed, verdict), or None when this process attributed nothing.
    Also how a job left pending by a process that died between storing and attributing gets its verdict."""
    from attribution.reports.render import verdict_to_dict
    from attribution.store import in_transaction
    from attribution.store.recurrence import render_with_recurrence
    from attribution.store.writer import JobSession

    def session(conn):
        return JobSession(conn, ctx, "attribute", job=job)

    def attempt(conn):
        s = session(conn)
        render = render_with_recurrence(conn, job.id, ctx, verdict_to_dict)
        return s.attribute(ruleset, correlate, render) if s.claim_attribution() else None

    last = None
    changed = False
    pending = known_pending or in_transaction(engine, lambda c: session(c).pending(), deadline=deadline)
    while pending and (done := in_transaction(engine, attempt, deadline=deadline)) is not None:
        changed = changed or done[1]
        last = (done[0], changed, done[2])
        pending = in_transaction(engine, lambda c: session(c).pending(), deadline=deadline)
    return last


def attribute_all_pending(ruleset: RuleSet, engine, deadline: float | None = None) -> int:
    """Attribute every job whose stored evidence is newer than its verdict (left so by a process killed between
    storing and attributing, or whose attributor gave up). Safe beside live ingests: it only takes jobs nobody
    is attributing. Returns how many jobs got a verdict computed."""
    import time

    from attribution.store import in_transaction
    from attribution.store.writer import pending_jobs

    done = 0
    for job, ctx in in_transaction(engine, pending_jobs, deadline=deadline):
        if deadline is not None and time.monotonic() >= deadline:
            break
        if attribute_pending(ruleset, engine, ctx, job, deadline) is not None:
            done += 1
    return done


def ingest_bundle(ruleset: RuleSet, engine, bundle: Path):
    from attribution.replay.keep import keep_bundle

    from attribution.collect.telemetry import collect_bundle_telemetry

    d = diagnose_bundle(ruleset, bundle)
    snaps, _ = collect_bundle_telemetry(Path(bundle), d.context.nodes)
    kept = keep_bundle(Path(bundle), d.context, ruleset, telemetry=snaps) if d.verdict.outcome != "none" else None
    return ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), source="bundle", telemetry=snaps,
                  evidence=kept)


def ingest_diagnosis(ruleset: RuleSet, engine, d: Diagnosis, source: str):
    """Store a live diagnosis (`backfill`: source `sacct`) with its kept evidence, the piece `<source>/connectors`
    of the job's document (merged with what node agents reported of it: merge_evidence_piece)."""
    return ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), source=source,
                  evidence_piece=d.evidence)
