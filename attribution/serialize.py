"""Model values as plain JSON documents and back: for the spool, the store's context column and the API.

Also the one codec of a report (the epilog payload: `{"type": "ingest", "source", "context", "events",
"coverage"}`): the node agent encodes it for the spool and the service, the spool replay and the service's
intake decode it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping

from attribution.errors import InputError, TimeError
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


@dataclass(frozen=True)
class Report:
    """One job's events and coverage from one reporter (a node epilog, the controller, a connector)."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    source: str
    telemetry: Mapping[str, Any] | None = None  # {node: (prolog, epilog)} counter snapshots (node.epilog's codec)


def report_to_json(report: Report) -> dict:
    return {"type": "ingest", "source": report.source, "context": context_to_json(report.context),
            "events": [event_to_json(e) for e in report.events],
            "coverage": [coverage_to_json(c) for c in report.coverage]}


def report_from_json(doc: Any, origin: str = "payload", *, max_events: int | None = None,
                     sources: Collection[str] | None = None, type_required: bool = False) -> Report:
    """A report from its JSON form. Raises InputError naming `origin` and the part that is wrong. `sources`: the
    reporters accepted (any when None); `type_required`: refuse a document without `"type": "ingest"`."""
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    if doc.get("type", None if type_required else "ingest") != "ingest":
        raise InputError(origin, f"unknown payload type {doc.get('type')!r} (expected 'ingest')")
    source = str(doc.get("source") or "node")
    if sources is not None and source not in sources:
        raise InputError(origin, f"source {source!r} is not one of {', '.join(sources)}")
    ctx = context_from_document(doc.get("context"), f"{origin}: context")
    events_doc = doc.get("events") or []
    coverage_doc = doc.get("coverage") or []
    if not isinstance(events_doc, list) or not isinstance(coverage_doc, list):
        raise InputError(origin, "events and coverage must be lists")
    if max_events is not None and len(events_doc) > max_events:
        raise InputError(origin, f"{len(events_doc)} events in one batch; at most {max_events} are accepted")
    events = tuple(_convert(event_from_json, d, f"{origin}: events[{i}]") for i, d in enumerate(events_doc))
    coverage = tuple(_convert(coverage_from_json, d, f"{origin}: coverage[{i}]") for i, d in enumerate(coverage_doc))
    return Report(ctx, events, coverage, source)


def context_from_document(doc: Any, origin: str = "context") -> ExecutionContext:
    """A context from a JSON object someone sent; InputError (naming `origin`) for anything unusable."""
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    try:
        return context_from_mapping(dict(doc), origin)
    except (ValueError, TimeError, TypeError, OverflowError) as exc:
        raise InputError(origin, str(exc)) from None


def _convert(fn, d: Any, origin: str):
    if not isinstance(d, Mapping):
        raise InputError(origin, "expected a JSON object")
    try:
        return fn(dict(d))
    except (ValueError, TimeError, TypeError, KeyError, OverflowError) as exc:
        raise InputError(origin, str(exc) or type(exc).__name__) from None
