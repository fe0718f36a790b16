"""The central drain of the node inbox: reports nodes submitted to the database (database.delivery: inbox) are
decoded, stored through the normal ingest and deleted from the inbox in the ingest's own transaction.

Exactly once: each row is deleted by the transaction that stores it (a DELETE first, which locks the row), so a
crash before the commit leaves both the row and nothing stored, and a second drain at the same row waits for the
first one's commit and finds it gone. Batched: the reports of one job are stored up to GROUP at a time in one
transaction (pipeline.store_piece, the writes of pipeline.ingest), the job's kept evidence read and written once
per group. Coalesced: each job this drain stored is attributed once at the end, from everything stored for it
(a job with 512 node reports: one verdict computed). The decoder is the service's (api.intake.parse_report), passed in by the
entry point, so a report reads the same whichever way it came.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from attribution.errors import InputError, StoreError

#: rows read per batch
BATCH = 200
#: reports of one job stored in one transaction (the job's lock is held that long; its kept evidence is read and
#: written once per group instead of once per report)
GROUP = 64


@dataclass
class DrainResult:
    stored: int = 0  # reports stored (and deleted from the inbox)
    jobs: int = 0  # jobs they belonged to
    attributed: int = 0  # jobs this drain computed a verdict for
    taken: int = 0  # rows another drain took first
    refused: list[str] = field(default_factory=list)  # rows set aside, with the reason
    error: str | None = None  # why it stopped early (the database away): the rest waits for the next run
    left: int = 0  # rows still waiting when it stopped (the count or the time ran out, or the error)

    def line(self) -> str:
        return (f"drained {self.stored} report(s) of {self.jobs} job(s), {self.attributed} attributed"
                + (f"; {len(self.refused)} refused" if self.refused else "")
                + (f"; {self.taken} taken by another drain" if self.taken else "")
                + (f"; {self.left} left" if self.left else "")
                + (f"; stopped: {self.error}" if self.error else ""))


def drain_inbox(ruleset, engine, decode: Callable[[Mapping, str], object], limit: int | None = None,
                deadline: float | None = None) -> DrainResult:
    """Store at most `limit` waiting reports (all when None) before `deadline` (a time.monotonic() value).
    `decode(payload, origin)` gives a serialize.Report or raises InputError. Never raises StoreError: a report
    the database refuses for its content is set aside, a database that went away stops the drain (`error`)."""
    from attribution.pipeline import attribute_pending
    from attribution.store import in_transaction
    from attribution.store import inbox as store_inbox

    res = DrainResult()
    stored_jobs: dict[int, tuple] = {}  # the job row id -> (context, job) of what this drain stored
    while limit is None or res.stored + len(res.refused) + res.taken < limit:
        if deadline is not None and time.monotonic() >= deadline:
            break
        want = BATCH if limit is None else min(BATCH, limit - res.stored - len(res.refused) - res.taken)
        try:
            rows = in_transaction(engine, lambda c: store_inbox.queued(c, want), deadline=deadline)
        except StoreError as exc:
            res.error = str(exc)
            break
        if not rows:
            break
        groups: dict[str, list] = {}  # by job id, in arrival order: one transaction stores a group
        for row in rows:
            piece = _decoded(ruleset, engine, decode, row, res, deadline)
            if piece is not None:
                groups.setdefault(row.job_id, []).append(piece)
        for pieces in groups.values():
            for i in range(0, len(pieces), GROUP):
                if res.error or (deadline is not None and time.monotonic() >= deadline):
                    break
                _store_group(ruleset, engine, pieces[i:i + GROUP], res, stored_jobs, deadline)
        if res.error or (deadline is not None and time.monotonic() >= deadline):
            break
    res.jobs = len(stored_jobs)
    # each job once, with everything stored for it (coalesced: not once per report); also when the drain
    # stopped early, so what it stored does not wait for the next run's verdict
    for ctx, job in stored_jobs.values():
        try:
            res.attributed += int(attribute_pending(ruleset, engine, ctx, job, deadline if deadline is None else
                                                    max(deadline, time.monotonic() + 30),
                                                    known_pending=True) is not None)
        except StoreError as exc:
            res.error = res.error or str(exc)
    try:
        res.left = in_transaction(engine, lambda c: store_inbox.counts(c)[0], deadline=None if deadline is None
                                  else max(deadline, time.monotonic() + 5))
    except StoreError:
        pass
    return res


def _decoded(ruleset, engine, decode, row, res: DrainResult, deadline):
    """(row, report, events inside the job's window, the rest), or None when it was set aside."""
    from attribution.pipeline import split_by_window

    origin = f"inbox report of job {row.job_id} ({row.digest.hex()[:12]}, from {row.submitted_by})"
    try:
        report = decode(row.payload, origin)
        return (row, report, *split_by_window(ruleset, report.context, list(report.events)))
    except InputError as exc:
        _refuse(engine, row, str(exc), res, deadline)
        return None


def _store_group(ruleset, engine, pieces: list, res: DrainResult, stored_jobs: dict, deadline) -> None:
    """Reports of one job in one transaction: each row taken (deleted) and its report stored, the job's kept
    evidence read and written once for all of them. A report the database refuses for its content fails the
    whole transaction: then each is stored on its own, so only that one is set aside."""
    from attribution.pipeline import save_kept, store_piece
    from attribution.store import in_transaction
    from attribution.store import inbox as store_inbox

    def work(conn):
        kept: dict = {}
        out = []
        for row, report, inside, outside in pieces:
            if not store_inbox.take(conn, row.job_id, row.digest):
                out.append(None)  # another drain stored it
                continue
            s, _, _, _ = store_piece(conn, report.context, inside, outside, list(report.coverage), report.source,
                                  report.telemetry, None, report.evidence, kept)
            out.append((report.context, s.job))
        save_kept(conn, kept)
        return out

    try:
        done = in_transaction(engine, work, deadline=deadline)
    except StoreError as exc:
        if not exc.permanent or len(pieces) == 1:
            if exc.permanent:
                _refuse(engine, pieces[0][0], str(exc), res, deadline)
            else:
                res.error = str(exc)
            return
        for piece in pieces:  # find the one the database refuses
            _store_group(ruleset, engine, [piece], res, stored_jobs, deadline)
            if res.error:
                return
        return
    for got in done:
        if got is None:
            res.taken += 1
        else:
            res.stored += 1
            stored_jobs.setdefault(got[1].id, got)


def _refuse(engine, row, reason: str, res: DrainResult, deadline: float | None) -> None:
    from attribution.store import in_transaction
    from attribution.store import inbox as store_inbox

    try:
        in_transaction(engine, lambda c: store_inbox.refuse(c, row.job_id, row.digest, reason),
                       deadline=None if deadline is None else max(deadline, time.monotonic() + 5))
    except StoreError as exc:
        res.error = str(exc)
        return
    res.refused.append(f"job {row.job_id} ({row.digest.hex()[:12]}, from {row.submitted_by}): {reason}")


__all__ = ["DrainResult", "drain_inbox", "BATCH", "GROUP"]
