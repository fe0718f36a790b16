"""Model values as plain JSON documents and back: for the spool, the store's context column and the API."""

from __future__ import annotations

from typing import Any

from attribution.model import Coverage, Event, ExecutionContext
from attribution.scope.bundle import context_from_mapping
from attribution.timeparse import format_utc, parse_iso


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


def context_from_json(doc: dict, origin: str = "stored context") -> ExecutionContext:
    return context_from_mapping(dict(doc), origin)


EVENT_FIELDS = ("kind", "role", "rule", "source", "location", "line", "message", "node", "gpu", "code", "rank",
                "outcome", "action", "severity")


def event_to_json(ev: Event) -> dict:
    d: dict[str, Any] = {k: getattr(ev, k) for k in EVENT_FIELDS}
    d["time"] = format_utc(ev.time)
    d["fields"] = dict(ev.fields)
    return d


def event_from_json(d: dict) -> Event:
    kw = {k: d.get(k) for k in EVENT_FIELDS}
    for req in ("kind", "role", "rule", "source", "location", "line", "message"):
        if not isinstance(kw.get(req), str):
            raise ValueError(f"event field {req!r} missing or not text")
    kw["severity"] = kw.get("severity") or "info"
    t = d.get("time")
    return Event(time=parse_iso(t) if t else None, fields=dict(d.get("fields") or {}), **kw)


def coverage_to_json(c: Coverage) -> dict:
    return c.as_dict()


def coverage_from_json(d: dict) -> Coverage:
    return Coverage(source=str(d["source"]), node=d.get("node"), status=str(d["status"]), lines=int(d.get("lines", 0)),
                    reason=d.get("reason"), file=d.get("file"), notes=tuple(d.get("notes") or ()))
