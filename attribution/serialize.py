"""Model values as plain JSON documents and back: for the store's context column, the API and the observation
documents (intake/codec.py decodes those).

Also the lines a reporter kept for replay (`evidence`: replay/keep.py makes it, docs/replay.md), bounded per
reporter by the EVIDENCE_ limits below, checked here.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

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
        "gpus_per_node": ctx.gpus_per_node, "job_name": ctx.job_name,
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


#: Bounds of the lines kept for replay, per reporter (a node's report, a bundle) and per job (replay.keep).
EVIDENCE_MAX_LINES = 2000
EVIDENCE_MAX_BYTES = 1 << 20  # of the lines' JSON strings (line_cost)
EVIDENCE_MAX_LINE_CHARS = 4096
#: Sources of kept lines; a node's report carries the system-written ones only.
EVIDENCE_SOURCES = ("kernel", "fabricmanager", "node", "job")
NODE_EVIDENCE_SOURCES = ("kernel", "fabricmanager", "node")


def line_cost(text: str) -> int:
    """What a kept line weighs against the bytes bound: its JSON string (UTF-8) and a separator, so the bound
    holds on the wire and in the store whatever the line holds."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 1


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 255 and "/" not in name and name not in (".", "..") \
        and "\0" not in name


def evidence_from_json(doc: Any, origin: str = "evidence", reporter_source: str | None = None) -> dict:
    """A reporter's kept lines, checked: each file at its bundle place for its source (a job's output under
    job/, a node's log under nodes/<node>/: replay reads it from there, so job output stays job output), each
    line [number, text, flags], within the EVIDENCE_ bounds. A node's report may carry no job output. Raises
    InputError naming `origin` and what is wrong."""
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    files_doc = doc.get("files") or []
    if not isinstance(files_doc, list):
        raise InputError(origin, "files must be a list")
    allowed = NODE_EVIDENCE_SOURCES if reporter_source == "node" else EVIDENCE_SOURCES
    files, n, size = [], 0, 0
    for i, f in enumerate(files_doc):
        where = f"{origin}: files[{i}]"
        if not isinstance(f, Mapping):
            raise InputError(where, "expected a JSON object")
        source, node, file = f.get("source"), f.get("node"), f.get("file")
        if source not in allowed:
            raise InputError(where, f"source {source!r} is not one of {', '.join(allowed)}")
        parts = file.split("/") if isinstance(file, str) else []
        place = (len(parts) == 2 and parts[0] == "job" and node is None) if source == "job" else (
            len(parts) == 3 and parts[0] == "nodes" and parts[1] == node)
        if not place or not all(_plain_name(x) for x in parts[1:]):
            raise InputError(where, f"file {file!r} is not the bundle place of a {source} log"
                                    + ("" if source == "job" else f" of node {node!r}"))
        lines = f.get("lines")
        if not isinstance(lines, list):
            raise InputError(where, "lines must be a list")
        for ln in lines:
            if not (isinstance(ln, (list, tuple)) and len(ln) == 3 and isinstance(ln[0], int) and ln[0] > 0
                    and isinstance(ln[1], str) and len(ln[1]) <= EVIDENCE_MAX_LINE_CHARS
                    and isinstance(ln[2], str) and ln[2] in ("p", "e", "pe")):
                raise InputError(where, "each line must be [number, text of at most "
                                        f"{EVIDENCE_MAX_LINE_CHARS} characters, flags p/e/pe]")
            size += line_cost(ln[1])
        n += len(lines)
        if n > EVIDENCE_MAX_LINES or size > EVIDENCE_MAX_BYTES:
            raise InputError(origin, f"over the bound of {EVIDENCE_MAX_LINES} lines or {EVIDENCE_MAX_BYTES} bytes")
        out = {"source": source, "node": node, "file": file}
        if isinstance(f.get("origin"), str):
            out["origin"] = f["origin"][:4096]
        files.append(out | {"lines": [list(ln) for ln in lines]})
    reporter = doc.get("reporter")
    candidates = doc.get("candidates", 0)
    return {"format": 1, "rules_version": str(doc.get("rules_version") or "")[:200] or None,
            "truncated": bool(doc.get("truncated")),
            "candidates": candidates if isinstance(candidates, int) and candidates >= 0 else 0,
            "files": files} | ({"reporter": reporter[:255]} if isinstance(reporter, str) and reporter else {})


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
