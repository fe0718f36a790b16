"""The one codec of an observation document (node/document.py): decoded and checked once, into values, whether
it arrives over HTTP (`POST /v1/observations`), from a node's spool or from the controller's own collection.

Two reporters write one: a node (role `node`: its kernel and Fabric Manager logs as blocks of raw lines, its counter
snapshots as the tools wrote them, the epilog's Slurm values; standard library only, it parses nothing) and the
controller's epilog (role `controller`, a full install on a trusted host: the job's final context as it made it
from Slurm, the job's output already collected into observation records with their coverage, and the lines kept
for replay). Everything a document says is bounded here
(its lines, their length, its names, its times), and a document that breaks a rule is refused whole with one
reason (InputError naming the part): it is a poison document, never half stored.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from attribution.errors import InputError
from attribution.frozen import Value
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.names import system_name_problem
from attribution.node.document import FORMAT, SLURM_KEYS
from attribution.node.snapshots import FILES as SNAPSHOT_FILES
from attribution.scope.bundle import MAX_NAME, expand_nodes

__all__ = ["FORMAT", "LogPiece", "NodeReport", "ControllerReport", "decode", "named_nodes", "Bounds"]

#: The sources a node's logs may be (system-written: docs/bundle.md "Trust"); a node never sends job output.
NODE_SOURCES = ("kernel", "fabricmanager", "node")
STATUSES = ("ok", "empty", "missing", "error")
#: Epoch seconds a document's times may hold (1970..2200, as a job context's)
EARLIEST, LATEST = 0.0, 7258118400.0


class Bounds(Value):
    """What one document may hold (the service's settings set them; these defaults are the service's)."""

    lines: int = 200_000  # kept lines of all its logs
    line_chars: int = 8192
    chars: int = 16 << 20  # of all its kept lines
    logs: int = 8
    observations: int = 200_000  # a controller's


class LogPiece(Value):
    """What a node read of one log and the lines of it it kept, as blocks of consecutive lines."""

    source: str
    origin: str  # journald, /dev/kmsg, or the file's path
    status: str
    reason: str | None
    notes: tuple[str, ...]
    lines: int  # read
    bytes: int  # read
    cut: bool  # the kept lines stopped at the node's bound
    blocks: tuple[tuple[int, tuple[str, ...]], ...]


class NodeReport(Value):
    """A node's document, decoded."""

    cluster: str
    node: str
    slurm: Mapping[str, str]
    now: float
    prolog_start: float | None
    boot: float | None
    lookback: int | None
    zone: str | None  # the node's time zone (an IANA name or an offset): for log stamps that carry none
    logs: tuple[LogPiece, ...]
    counters: Mapping[str, Mapping[str, str]]  # {"prolog": {file: text}, "epilog": {...}}
    counters_folder: str | None
    agent: str | None
    filter_digest: str | None


class ControllerReport(Value):
    """The controller epilog's document, decoded."""

    cluster: str
    name: str
    context: ExecutionContext
    observations: tuple[Observation, ...]
    coverage: tuple[Coverage, ...]
    evidence: Mapping[str, Any] | None
    agent: str | None


def _fail(where: str, why: str):
    raise InputError(where, why)


def _text(v: Any, where: str, most: int = 4096, empty: bool = True) -> str:
    if not isinstance(v, str) or len(v) > most or (not empty and not v):
        _fail(where, f"expected text of at most {most} characters" + ("" if empty else ", not empty"))
    if "\0" in v:
        _fail(where, "holds a NUL character")
    return v


def _name(v: Any, where: str) -> str:
    """A cluster or node name: the rule of every intake (attribution/names.py)."""
    v = _text(v, where, MAX_NAME, empty=False)
    problem = system_name_problem(v)
    if problem is not None:
        _fail(where, f"{v[:80]!r} is not a node or cluster name: {problem}")
    return v


def _epoch(v: Any, where: str, optional: bool = True) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not EARLIEST <= v < LATEST:
        _fail(where, "expected epoch seconds between 1970 and 2200")
    return float(v)


def _count(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        _fail(where, "expected a whole number >= 0")
    return v


def _strings(v: Any, where: str, most: int = 50, chars: int = 500) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or len(v) > most:
        _fail(where, f"expected a list of at most {most} texts")
    return tuple(_text(x, f"{where}[{i}]", chars) for i, x in enumerate(v))


def _slurm(v: Any, where: str) -> dict[str, str]:
    if not isinstance(v, Mapping):
        _fail(where, "expected a JSON object of the epilog's SLURM_* values")
    out = {}
    for k, x in v.items():
        if k not in SLURM_KEYS:
            _fail(where, f"{str(k)[:80]!r} is not one of the epilog's values a report carries")
        out[k] = _text(x, f"{where}.{k}")
    if not (out.get("SLURM_JOB_ID") or out.get("SLURM_JOBID")):
        _fail(where, "SLURM_JOB_ID is missing")
    return out


def _logs(v: Any, where: str, bounds: Bounds, sources) -> tuple[LogPiece, ...]:
    if not isinstance(v, list) or len(v) > bounds.logs:
        _fail(where, f"expected a list of at most {bounds.logs} logs")
    out, lines, chars = [], 0, 0
    for i, log in enumerate(v):
        at = f"{where}[{i}]"
        if not isinstance(log, Mapping):
            _fail(at, "expected a JSON object")
        source = log.get("source")
        if source not in sources:
            _fail(f"{at}.source", f"{source!r} is not one of {', '.join(sources)}")
        status = log.get("status")
        if status not in STATUSES:
            _fail(f"{at}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
        blocks_doc = log.get("blocks") or []
        if not isinstance(blocks_doc, list):
            _fail(f"{at}.blocks", "expected a list of [first line, [lines]]")
        blocks, after = [], 0
        for j, b in enumerate(blocks_doc):
            bat = f"{at}.blocks[{j}]"
            if not (isinstance(b, list) and len(b) == 2 and isinstance(b[0], int) and not isinstance(b[0], bool)
                    and isinstance(b[1], list) and b[1]):
                _fail(bat, "expected [number of its first line, [one or more lines]]")
            if b[0] <= after:
                _fail(bat, "blocks must come in line order, without overlap")
            text = []
            for k, ln in enumerate(b[1]):
                if not isinstance(ln, str) or len(ln) > bounds.line_chars or "\n" in ln or "\0" in ln:
                    _fail(f"{bat}[{k}]", f"expected one line of at most {bounds.line_chars} characters, no NUL")
                chars += len(ln)
                text.append(ln)
            lines += len(text)
            after = b[0] + len(text) - 1
            blocks.append((b[0], tuple(text)))
        if lines > bounds.lines or chars > bounds.chars:
            _fail(where, f"over the bound of {bounds.lines} kept lines or {bounds.chars} characters")
        out.append(LogPiece(source, _text(log.get("origin"), f"{at}.origin", empty=False),
                            status, None if log.get("reason") is None else _text(log["reason"], f"{at}.reason", 500),
                            _strings(log.get("notes"), f"{at}.notes"), _count(log.get("lines", 0), f"{at}.lines"),
                            _count(log.get("bytes", 0), f"{at}.bytes"), bool(log.get("cut")), tuple(blocks)))
    return tuple(out)


def _counters(v: Any, where: str) -> tuple[dict, str | None]:
    if v is None:
        return {}, None
    if not isinstance(v, Mapping):
        _fail(where, "expected a JSON object of snapshots by phase")
    out = {}
    for phase, files in v.items():
        if phase == "folder":
            continue
        if phase not in ("prolog", "epilog") or not isinstance(files, Mapping):
            _fail(f"{where}.{str(phase)[:40]}", "expected prolog or epilog: {file: text}")
        got = {}
        for name, text in files.items():
            if name not in SNAPSHOT_FILES:
                _fail(f"{where}.{phase}", f"{str(name)[:80]!r} is not one of the snapshot's files")
            got[name] = _text(text, f"{where}.{phase}.{name}", 8 << 20)
        out[phase] = got
    folder = v.get("folder")
    return out, None if folder is None else _text(folder, f"{where}.folder")


def _observations(v: Any, where: str, bounds: Bounds) -> tuple[Observation, ...]:
    from attribution.timeparse import TimeError, parse_iso

    if not isinstance(v, list) or len(v) > bounds.observations:
        _fail(where, f"expected a list of at most {bounds.observations} observations")
    out = []
    for i, o in enumerate(v):
        at = f"{where}[{i}]"
        if not isinstance(o, Mapping):
            _fail(at, "expected a JSON object")
        if o.get("source") != "job":
            _fail(f"{at}.source", "a controller's observations are the job's output (source job)")
        node = o.get("node")
        t = o.get("time")
        try:
            when = parse_iso(_text(t, f"{at}.time", 64)) if t is not None else None
        except (TimeError, ValueError, OverflowError):
            _fail(f"{at}.time", "not an ISO 8601 time")
        rank, label = o.get("rank"), o.get("label")
        for key, x in (("rank", rank), ("label", label)):
            if x is not None and (isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 2**31):
                _fail(f"{at}.{key}", "expected a whole number")
        flags = o.get("flags") or []
        out.append(Observation(
            "job", None if node is None else _name(node, f"{at}.node"),
            _text(o.get("location"), f"{at}.location", empty=False),
            _text(o.get("text"), f"{at}.text", bounds.line_chars * 17),
            _text(o.get("line"), f"{at}.line", bounds.line_chars),
            when, None if o.get("host") is None else _text(o["host"], f"{at}.host", MAX_NAME),
            rank, label, frozenset(_strings(flags, f"{at}.flags", 8, 64))))
    return tuple(out)


def _coverage(v: Any, where: str) -> tuple[Coverage, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or len(v) > 10_000:
        _fail(where, "expected a list of coverage records")
    out = []
    for i, c in enumerate(v):
        at = f"{where}[{i}]"
        if not isinstance(c, Mapping):
            _fail(at, "expected a JSON object")
        if c.get("status") not in STATUSES:
            _fail(f"{at}.status", f"{c.get('status')!r} is not one of {', '.join(STATUSES)}")
        node = c.get("node")
        out.append(Coverage(_text(c.get("source"), f"{at}.source", 64, empty=False),
                            None if node is None else _name(node, f"{at}.node"), c["status"],
                            _count(c.get("lines", 0), f"{at}.lines"),
                            None if c.get("reason") is None else _text(c["reason"], f"{at}.reason", 500),
                            None if c.get("file") is None else _text(c["file"], f"{at}.file"),
                            _strings(c.get("notes"), f"{at}.notes")))
    return tuple(out)


def _zone(v: Any, where: str) -> str:
    from attribution.timeparse import TimeError, resolve_zone

    v = _text(v, where, 64, empty=False)
    try:
        resolve_zone(v)
    except (TimeError, ValueError):
        _fail(where, f"{v!r} is not a time zone (an IANA name or an offset such as +09:00)")
    return v


def decode(doc: Any, origin: str = "document", bounds: Bounds = Bounds()) -> NodeReport | ControllerReport:
    """An observation document to its values; InputError (naming `origin` and the part) for anything wrong."""
    if not isinstance(doc, Mapping):
        _fail(origin, "expected a JSON object")
    from attribution.node.spool import not_utf8

    where = not_utf8(doc, origin)
    if where is not None:  # a lone surrogate from a JSON \ud800 escape: nothing downstream can store it
        _fail(where, "is not UTF-8 text")
    if doc.get("format") != FORMAT:
        _fail(f"{origin}: format", f"{str(doc.get('format'))[:80]!r} is not {FORMAT!r} (an observation document; "
                                   f"a node agent older than this service sends another: upgrade it)")
    reporter = doc.get("reporter")
    if not isinstance(reporter, Mapping):
        _fail(f"{origin}: reporter", "expected a JSON object")
    role = reporter.get("role")
    agent = None if reporter.get("agent") is None else _text(reporter["agent"], f"{origin}: reporter.agent", 200)
    cluster = doc.get("cluster")
    cluster = "default" if cluster in (None, "") else _name(cluster, f"{origin}: cluster")
    if role == "node":
        slurm = _slurm(doc.get("slurm"), f"{origin}: slurm")
        times = doc.get("times") or {}
        if not isinstance(times, Mapping):
            _fail(f"{origin}: times", "expected a JSON object")
        now = _epoch(times.get("now"), f"{origin}: times.now", optional=False)
        zone = None if times.get("zone") is None else _zone(times["zone"], f"{origin}: times.zone")
        for key in ("observations", "coverage", "evidence", "context"):
            if doc.get(key) is not None:
                _fail(f"{origin}: {key}", "a node's report holds its logs and counters only")
        node = _name(reporter.get("name"), f"{origin}: reporter.name")
        if slurm.get("SLURMD_NODENAME", node) != node:
            _fail(f"{origin}: slurm.SLURMD_NODENAME", f"{slurm['SLURMD_NODENAME']!r} is not the reporter {node!r}")
        lookback = times.get("lookback")
        if lookback is not None:
            lookback = _count(lookback, f"{origin}: times.lookback")
        digest = reporter.get("filter")
        counters, folder = _counters(doc.get("counters"), f"{origin}: counters")
        return NodeReport(cluster, node, slurm, now, _epoch(times.get("prolog_start"), f"{origin}: times.prolog_start"),
                          _epoch(times.get("boot"), f"{origin}: times.boot"), lookback, zone,
                          _logs(doc.get("logs") or [], f"{origin}: logs", bounds, NODE_SOURCES), counters, folder,
                          agent, None if digest is None else _text(digest, f"{origin}: reporter.filter", 128))
    if role == "controller":
        if doc.get("logs") or doc.get("counters"):
            _fail(f"{origin}: logs", "the controller's report holds the job's observations, not node logs")
        from attribution.serialize import context_from_document

        context = context_from_document(doc.get("context"), f"{origin}: context")
        if context.cluster != cluster:
            _fail(f"{origin}: context.cluster", f"{context.cluster!r} is not the document's cluster {cluster!r}")
        evidence = None
        if doc.get("evidence") is not None:
            from attribution.serialize import evidence_from_json

            evidence = evidence_from_json(doc["evidence"], f"{origin}: evidence", "controller")
        return ControllerReport(cluster, _text(reporter.get("name") or "controller", f"{origin}: reporter.name",
                                               MAX_NAME), context,
                                _observations(doc.get("observations") or [], f"{origin}: observations", bounds),
                                _coverage(doc.get("coverage"), f"{origin}: coverage"), evidence, agent)
    _fail(f"{origin}: reporter.role", f"{str(role)[:40]!r} is not node or controller")


def named_nodes(report: NodeReport | ControllerReport) -> set[str]:
    """Every node a report names (its reporter, the job's node list): what a token bound to nodes must cover."""
    if isinstance(report, ControllerReport):
        return set(report.context.nodes) | ({report.context.failed_node} if report.context.failed_node else set())
    value = report.slurm.get("SLURM_JOB_NODELIST") or report.slurm.get("SLURM_NODELIST")
    names = set(expand_nodes(value, "slurm: SLURM_NODELIST")) if value else set()
    names.add(report.node)
    return names
