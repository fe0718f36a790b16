"""Model values to and from their stored form: event fingerprints, event rows, context documents."""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from ..model import Event, ExecutionContext
from ..scope import context_from_mapping
from ..timeparse import format_utc


def fingerprint(cluster: str, ev: Event, scope: str = "") -> bytes:
    """Identity of a fault event: (cluster, node, source, time, kind, normalized message), plus the job and the
    line's location for job-scoped lines (a job's output belongs to that job only)."""
    t = ev.time.isoformat() if ev.time else ""
    parts = [cluster, ev.node or "", ev.source, t, ev.kind, ev.message]
    if scope:
        parts += [scope, ev.location]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()[:16]


def event_from_row(r: Sequence[Any]) -> Event:
    (kind, role, rule, source, location, line, message, node, gpu, code, rank, time, outcome, action, severity,
     fields) = r
    return Event(kind=kind, role=role, rule=rule, source=source, location=location, line=line, message=message,
                 node=node, gpu=gpu, code=code, rank=rank, time=time, outcome=outcome, action=action,
                 severity=severity, fields=dict(fields or {}))


def context_to_json(ctx: ExecutionContext) -> dict:
    d = {
        "scheduler": ctx.scheduler, "cluster": ctx.cluster, "job_id": ctx.job_id, "user": ctx.user,
        "partition": ctx.partition, "state": ctx.state, "exit_code": ctx.exit_code, "failed_node": ctx.failed_node,
        "nodes": list(ctx.nodes), "tasks_per_node": ctx.tasks_per_node,
        "srun_tasks_per_node": ctx.srun_tasks_per_node, "start": format_utc(ctx.start), "end": format_utc(ctx.end),
        "timezone": ctx.timezone, "boot_time": {k: format_utc(v) for k, v in ctx.boot_time.items()},
        "gpus_per_node": ctx.gpus_per_node,
    }
    return {k: v for k, v in d.items() if v not in (None, {}, [])}


def context_from_json(doc: dict) -> ExecutionContext:
    return context_from_mapping(dict(doc), "stored context")
