"""Writing a job's evidence and verdicts: idempotent, batched, safe to run from many processes at once.

All work on one job happens in a `JobSession`: one transaction holding a per-job advisory lock, so concurrent
ingests of the same job (64 node epilogs at once) queue up instead of racing, and every ingest re-attributes
the job from everything stored so far. Events go in through COPY into a temporary table and one
`INSERT ... ON CONFLICT DO NOTHING`, in fingerprint order (a fixed lock order: no deadlocks between jobs that
share kernel lines). The parts: `jobs` (the row, the locks), `events` (events and rollups), `verdicts`.
Every statement about one job names its `job_id`, every one about events their `node_key` (links.py): on Citus
each is routed to the shards it needs.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from sqlalchemy import text

from attribution.model import Coverage
from attribution.store.events import EVENT_COLUMNS, JobEvents
from attribution.store.jobs import CONTEXT_PRECEDENCE, SAME_JOB_WINDOW, IngestResult, JobRef, JobRow, pending_jobs
from attribution.store.verdicts import JobVerdicts, verdict_digest

__all__ = ["JobSession", "JobRef", "IngestResult", "pending_jobs", "verdict_digest", "CONTEXT_PRECEDENCE",
           "SAME_JOB_WINDOW", "EVENT_COLUMNS"]


class JobSession(JobRow, JobEvents, JobVerdicts):
    """Everything stored about one job, inside one transaction that holds the job's advisory lock."""

    def set_coverage(self, coverage: Iterable[Coverage]) -> None:
        rows = [{"jid": self.job.job_id, "job": self.job.id, "source": c.source, "node": c.node or "",
                 "file": c.file or "",
                 "status": c.status, "lines": c.lines, "reason": c.reason, "notes": list(c.notes)}
                for c in coverage]
        if not rows:
            return
        rows.sort(key=lambda r: (r["source"], r["node"], r["file"]))
        self.conn.execute(text(
            "INSERT INTO attribution.coverage (job_id, job_ref, source, node_key, file_key, status, lines, reason, "
            "notes) VALUES (:jid, :job, :source, :node, :file, :status, :lines, :reason, :notes) "
            "ON CONFLICT (job_id, job_ref, source, node_key, file_key) DO UPDATE SET status = excluded.status, "
            "lines = excluded.lines, reason = excluded.reason, notes = excluded.notes, "
            "reported_at = excluded.reported_at"), rows)

    def coverage(self) -> list[Coverage]:
        rows = self.conn.execute(text(
            "SELECT source, node_key, status, lines, reason, file_key, notes FROM attribution.coverage "
            "WHERE job_id = :jid AND job_ref = :id"), self._key()).all()
        return [Coverage(source=r[0], node=r[1] or None, status=r[2], lines=int(r[3]), reason=r[4], file=r[5] or None,
                         notes=tuple(r[6] or ())) for r in rows]

    def set_counters(self, telemetry: Mapping) -> int:
        """Keep the absolute counter values of each device in each snapshot ({node: (prolog, epilog)}): every GPU
        and port, and the PCI devices whose AER counters are not all zero. Returns the rows written."""
        rows = []
        for node, pair in sorted(telemetry.items()):
            for snap in pair:
                if snap is None:
                    continue
                taken = self.ctx.start if snap.phase == "prolog" else self.ctx.end
                for kind, devices in (("gpu", snap.gpus), ("ib_port", snap.ports), ("pci", snap.pci)):
                    for device, values in sorted(devices.items()):
                        if kind == "pci" and not any(values.values()):
                            continue
                        info = dict(snap.gpu_info.get(device, {})) if kind == "gpu" else {}
                        rows.append({"jid": self.job.job_id, "job": self.job.id, "cluster": self.ctx.cluster,
                                     "node": node, "kind": kind,
                                     "device": device, "phase": snap.phase, "taken": taken,
                                     "counters": json.dumps(dict(values), sort_keys=True),
                                     "info": json.dumps(info, sort_keys=True)})
        if rows:
            self.conn.execute(text(
                "INSERT INTO attribution.device_counters (job_id, job_ref, cluster, node, device_kind, device, phase, "
                "taken_at, counters, info) VALUES (:jid, :job, :cluster, :node, :kind, :device, :phase, :taken, "
                "CAST(:counters AS jsonb), CAST(:info AS jsonb)) "
                "ON CONFLICT (job_id, job_ref, node, device_kind, device, phase) DO UPDATE SET "
                "taken_at = excluded.taken_at, counters = excluded.counters, info = excluded.info, "
                "stored_at = excluded.stored_at"), rows)
        return len(rows)
