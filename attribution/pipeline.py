"""The one place that wires the stages: scope -> collect -> extract -> correlate.

The CLI, the hooks and the API are thin entry points over these functions.
"""

from __future__ import annotations

from pathlib import Path

from attribution.frozen import Value
from attribution.collect.bundle import collect_bundle
from attribution.collect.telemetry import collect_bundle_telemetry
from attribution.correlate.rootcause import correlate
from attribution.errors import InputError
from attribution.extract.events import extract
from attribution.model import Coverage, Event, ExecutionContext, Observation, Verdict
from attribution.rulepack.values import RuleSet
from attribution.scope.bundle import check_storable, load_context, scheduler_observations


class Diagnosis(Value):
    """One job's context, events, coverage and verdict."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    verdict: Verdict
    #: what the live connectors read, kept for replay (a piece: replay/keep.py, replay/streams.py), when asked for
    #: and the job failed
    evidence: dict | None = None


def scheduler_events(ruleset: RuleSet, ctx: ExecutionContext) -> list[Event]:
    """The scheduler's word on a job (its state, the failed node) as events, the way the controller hook makes them."""
    return extract(ruleset, ctx, scheduler_observations(ctx))


def diagnose_observations(ruleset: RuleSet, ctx: ExecutionContext, observations: list[Observation],
                          coverage: list[Coverage], max_symptoms: int | None = None,
                          extra_events: list[Event] = ()) -> Diagnosis:
    obs = list(observations) + scheduler_observations(ctx)
    events = extract(ruleset, ctx, obs)
    if extra_events:
        events = sorted(events + list(extra_events), key=Event.sort_key)
    verdict = correlate(ruleset, ctx, events, coverage, max_symptoms=max_symptoms)
    return Diagnosis(ctx, tuple(events), tuple(coverage), verdict)


def open_bundle(bundle: Path) -> tuple[Path, ExecutionContext]:
    """The bundle's folder and its context, or InputError naming what is wrong with it."""
    bundle = Path(bundle)
    if not bundle.exists():
        raise InputError(str(bundle), "no such bundle")
    if not bundle.is_dir():
        raise InputError(str(bundle), "not a directory (an incident bundle is a folder with context.yaml)")
    return bundle, load_context(bundle / "context.yaml")


def diagnose_bundle(ruleset: RuleSet, bundle: Path, max_symptoms: int | None = None) -> Diagnosis:
    bundle, ctx = open_bundle(bundle)
    observations, coverage = collect_bundle(bundle, ctx, ruleset.prefilter)
    snaps, tcov = collect_bundle_telemetry(bundle, ctx.nodes)
    return diagnose_observations(ruleset, ctx, observations, coverage + tcov, max_symptoms,
                                 telemetry_events(ruleset, ctx, snaps))


#: How many symptoms a verdict lists when nobody asked for a number (the totals and groups count them all).
LISTED_SYMPTOMS = 1000


def diagnose_bundle_folded(ruleset: RuleSet, bundle: Path, listed: int = LISTED_SYMPTOMS) -> Diagnosis:
    """diagnose_bundle in memory bounded by the causes, not by the logs: each observation is extracted as it is
    read and its symptoms folded (correlate.digest). The verdict is diagnose_bundle's with its symptom list cut
    at `listed` (totals and groups exact); the diagnosis's events are the kept ones (causes, context, the first
    `listed` symptoms), not every symptom."""
    from attribution.collect.bundle import stream_bundle
    from attribution.correlate.digest import SymptomDigest
    from attribution.extract.events import believable_window, extract_one, untrusted_time_dropped
    from attribution.timeparse import resolve_zone

    bundle, ctx = open_bundle(bundle)
    zone = resolve_zone(ctx.timezone)
    lo, hi = believable_window(ruleset, ctx)
    digest = SymptomDigest(ruleset.graph, ctx, listed)
    coverage: list[Coverage] = []
    for obs in stream_bundle(bundle, ctx, ruleset.prefilter, coverage):  # as extract() does, one at a time
        digest.extend(untrusted_time_dropped(e, lo, hi) for e in extract_one(ruleset, ctx, obs, zone))
    for obs in scheduler_observations(ctx):
        digest.extend(untrusted_time_dropped(e, lo, hi) for e in extract_one(ruleset, ctx, obs, zone))
    snaps, tcov = collect_bundle_telemetry(bundle, ctx.nodes)
    digest.extend(telemetry_events(ruleset, ctx, snaps))
    coverage += tcov
    verdict = correlate(ruleset, ctx, (), coverage, digest=digest)
    events = sorted(digest.kept + digest.top(), key=Event.sort_key)
    return Diagnosis(ctx, tuple(events), tuple(coverage), verdict)


def telemetry_events(ruleset: RuleSet, ctx: ExecutionContext, snapshots) -> list[Event]:
    """The counter rules' events of every node's (prolog, epilog) snapshots."""
    from attribution.extract.counters import counter_rules, evaluate

    rules = counter_rules(ruleset)
    out: list[Event] = []
    for node, (pro, epi) in sorted(snapshots.items()):
        out += evaluate(ruleset, ctx, node, pro, epi, rules)
    return out


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
    from attribution.reports.render import verdict_to_dict
    from attribution.store import in_transaction
    from attribution.drain.life import from_evidence as life_of_evidence
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
    """Put one reporter's kept lines and its counter snapshots into the job's kept evidence (under the job's
    lock, in the transaction that stores its events). The reporter is `source/reporter` (`node/g01`)."""
    from attribution.replay.keep import keep_telemetry, merge_piece
    from attribution.store.evidence import load_evidence, save_evidence

    key = f"{source}/{piece.get('reporter') or ''}"
    doc = merge_piece(load_evidence(conn, job.job_id, job.id), key, dict(piece) | keep_telemetry(telemetry or {}))
    save_evidence(conn, job.job_id, job.id, doc)


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

    d = diagnose_bundle(ruleset, bundle)
    snaps, _ = collect_bundle_telemetry(Path(bundle), d.context.nodes)
    kept = keep_bundle(Path(bundle), d.context, ruleset, telemetry=snaps) if d.verdict.outcome != "none" else None
    return ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), source="bundle", telemetry=snaps,
                  evidence=kept)


# -- live jobs: the context from a scheduler, the evidence from the configured connectors ---------------------------


def diagnose_collected(ruleset: RuleSet, ctx: ExecutionContext, observations: list[Observation],
                       coverage: list[Coverage], series=(), metric_labels=None,
                       max_symptoms: int | None = None) -> Diagnosis:
    """Like diagnose_observations, plus the events the metric rules find in metric series."""
    from attribution.extract.metrics import evaluate, metric_rules

    obs = list(observations) + scheduler_observations(ctx)
    events = extract(ruleset, ctx, obs)
    if series:
        events += evaluate(ruleset, ctx, metric_rules(ruleset, metric_labels), series)
        events.sort(key=Event.sort_key)
    verdict = correlate(ruleset, ctx, events, coverage, max_symptoms=max_symptoms)
    return Diagnosis(ctx, tuple(events), tuple(coverage), verdict)


def _keeper(ruleset: RuleSet, keep: bool):
    from attribution.replay.keep import LineKeeper

    return LineKeeper(ruleset) if keep else None


def diagnose_live(ruleset: RuleSet, connectors, ctx: ExecutionContext, observations=(), coverage=(),
                  workload=None, max_symptoms: int | None = None, keeper=None) -> Diagnosis:
    """Collect a job's evidence with the configured connectors (files, Loki, Prometheus, pod logs) and diagnose.
    With `keeper` (replay.keep.LineKeeper, which may hold lines read before), the diagnosis of a failed job
    carries what they read as the piece kept for replay (docs/replay.md): their lines, with the metric series."""
    from datetime import timedelta

    from attribution.collect.connectors import collect_configured, query_window
    from attribution.extract.metrics import metric_rules

    labels = connectors.prometheus.labels
    window = query_window(ctx, timedelta(seconds=ruleset.graph.before_start_seconds),
                          timedelta(seconds=ruleset.graph.after_end_seconds))
    rules = metric_rules(ruleset, labels)
    got = collect_configured(connectors, ctx, ruleset.prefilter, rules, window, workload, keeper=keeper)
    d = diagnose_collected(ruleset, ctx, list(observations) + got.observations, list(coverage) + got.coverage,
                           got.series, labels, max_symptoms)
    if keeper is None or d.verdict.outcome == "none":
        return d
    from attribution.replay.streams import keep_metrics

    piece = keeper.document(reporter=CONNECTORS_REPORTER) | keep_metrics(got.series, rules, ctx, labels,
                                                                         keeper.limits)
    return Diagnosis(d.context, d.events, d.coverage, d.verdict, evidence=piece)


#: The reporter of the piece a job's connectors give (the store keys it `<source>/connectors`: `sacct/connectors`).
CONNECTORS_REPORTER = "connectors"


def diagnose_sacct_job(ruleset: RuleSet, connectors, job, cluster: str | None = None, job_output=(),
                       max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """One job sacct listed: its stdout/stderr when readable from here, plus the configured connectors; `keep`:
    with what they read kept for replay (Diagnosis.evidence)."""
    from attribution.collect.joboutput import node_of_file, read_job_output
    from attribution.scope.sacct import context_of
    from attribution.scope.schedulers import job_output_paths

    ctx = context_of(job, cluster)
    keeper = _keeper(ruleset, keep)
    paths = [Path(p) for p in job_output]
    if not paths and connectors.slurm.job_output:
        paths = job_output_paths(connectors, job)
    obs: list[Observation] = []
    cov: list[Coverage] = []
    for p in paths:
        tap = None if keeper is None else keeper.stream_tap("text", "job", node_of_file(p.name, ctx.nodes), str(p))
        o, c = read_job_output(p, str(p), ctx, ruleset.prefilter("job"), tap=tap)
        obs += o
        cov.append(c)
    return diagnose_live(ruleset, connectors, ctx, obs, cov, max_symptoms=max_symptoms, keeper=keeper)


def diagnose_slurm_job(ruleset: RuleSet, connectors, job_id: str, cluster: str | None = None, job_output=(),
                       max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """`attribution diagnose --slurm-job ID`: the context from sacct, the evidence from the connectors."""
    from attribution.scope.schedulers import sacct_job

    job = sacct_job(connectors, job_id)
    if not job.ended:
        raise InputError(f"job {job_id}", f"still {job.state}: diagnose it once it has ended")
    return diagnose_sacct_job(ruleset, connectors, job, cluster, job_output, max_symptoms, keep)


def diagnose_kueue_workload(ruleset: RuleSet, connectors, ref: str, cluster: str, pod_selector: str | None = None,
                            max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """`attribution diagnose --kueue-workload NS/NAME`: placement and window from the Workload and its pods, the
    evidence from the pods' logs and the connectors."""
    from attribution.scope.kueue import parse_workload_ref
    from attribution.scope.schedulers import kueue_workload

    ns, name = parse_workload_ref(ref)
    workload, _ = kueue_workload(connectors, ns, name, cluster, pod_selector)
    return diagnose_live(ruleset, connectors, workload.context, workload=workload, max_symptoms=max_symptoms,
                         keeper=_keeper(ruleset, keep))


def ingest_diagnosis(ruleset: RuleSet, engine, d: Diagnosis, source: str):
    """Store a live diagnosis (`backfill`: source `sacct`) with its kept evidence, the piece `<source>/connectors`
    of the job's document (merged with what node agents reported of it: pipeline.merge_evidence_piece)."""
    return ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), source=source,
                  evidence_piece=d.evidence)


def failed_slurm_jobs(connectors, since, until) -> list:
    """Every job that ended in [since, until) in a state other than COMPLETED, oldest end first."""
    from attribution.scope.schedulers import sacct_jobs

    from attribution.timeparse import TimeError, parse_iso

    out = []
    for j in sacct_jobs(connectors, since=since, until=until):
        if not j.failed:
            continue
        try:
            end = parse_iso(j.get("End") or "")
        except TimeError:
            continue
        if since <= end < until:
            out.append((end, j))
    return [j for _, j in sorted(out, key=lambda x: (x[0], x[1].job_id))]


def diagnose_static(ruleset: RuleSet, connectors, context_file: Path, max_symptoms: int | None = None,
                    keep: bool = False) -> Diagnosis:
    """`attribution diagnose --context FILE`: a context written by hand (context.yaml, docs/bundle.md), the
    evidence from the configured connectors."""
    return diagnose_live(ruleset, connectors, load_context(Path(context_file)), max_symptoms=max_symptoms,
                         keeper=_keeper(ruleset, keep))


# -- drain: the policy over the stored history, decided within the caps, acted on through Slurm -------------


def drain_plan(engine, policy, cluster: str | None = None) -> list:
    """The nodes the policy would drain now (drain candidates, best first), for one cluster or all."""
    from attribution.store import drain as sd

    sd.load_policy(engine, policy)
    return sd.candidates(engine, cluster)


def drain_apply(engine, policy, slurm, cluster: str, actor: str, dry_run: bool = False) -> list[tuple]:
    """Decide on the cluster's candidates within the policy's caps and drain through `slurm` (drain.slurmctl's
    Scontrol); every decision is audited unless `dry_run`. Returns (decision, word, detail) per candidate.

    One run per cluster at a time (a session advisory lock, issue 18 M4), and each drain's audit row is written
    before its scontrol call: a second run started meanwhile waits, then counts the first one's drains against
    the hourly cap."""
    from datetime import datetime, timedelta, timezone

    from attribution.drain.policy import decide
    from attribution.drain.slurmctl import SlurmError
    from attribution.store import drain as sd

    with sd.apply_lock(engine, cluster):
        nodes = slurm.nodes()
        if not dry_run:  # Slurm's view first: a node rebooted or resumed with Slurm's own tools is no candidate
            drain_sync(engine, cluster, nodes)
        cands = drain_plan(engine, policy, cluster)
        recent = sd.applied_since(engine, cluster, datetime.now(timezone.utc) - timedelta(hours=1))
        rows = []
        for d in decide(cands, nodes, policy, recent):
            word, detail = d.decision, d.detail
            if d.decision == "apply":
                if dry_run:
                    word, detail = "would apply", "dry run"
                else:
                    action = sd.record_drain(engine, cluster, d, policy.version, actor)  # audit first
                    try:
                        slurm.drain(d.candidate.node, d.candidate.reason)
                        word = "applied"
                    except SlurmError as exc:
                        word, detail = "failed", str(exc)
                        sd.drain_outcome(engine, action, word, detail)
            rows.append((d, word, detail))
        if not dry_run:  # the drains' own rows are written already
            sd.audit(engine, cluster, [r for r in rows if r[1] not in ("applied", "failed")], policy.version, actor)
        if any(r[1] == "applied" for r in rows):
            try:  # Slurm's view with our drains in it: a resume with Slurm's tools before the next view is seen
                drain_sync(engine, cluster, slurm.nodes())
            except SlurmError:
                pass  # the drains stand; the next sync-nodes sees them
    return rows


def drain_sync(engine, cluster: str, nodes) -> list:
    """Record Slurm's view of the cluster's nodes (`slurm.nodes()`): their boots, drains and resumes since the
    last view go into the node's life (store.node_life). Returns the changes."""
    from datetime import datetime, timezone

    from attribution.store.node_life import sync

    return sync(engine, cluster, nodes, datetime.now(timezone.utc))


def drain_resume(open_engine, slurm, cluster: str, node: str, actor: str) -> int:
    """Give a node back: resume it in Slurm, then (`open_engine()`: a context manager giving the engine) mark its
    earlier evidence handled. Returns how many events were marked."""
    from attribution.store import drain as sd

    slurm.resume(node)
    with open_engine() as engine:
        return sd.record_resume(engine, cluster, node, actor, "resumed by attribution drain resume")
