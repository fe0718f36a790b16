"""scope: the static adapter. A bundle's context.yaml becomes an immutable ExecutionContext.

`parse_context` is pure (text in, value out); `load_context` only reads the file.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

import hostlist

from attribution.errors import InputError
from attribution.model import ExecutionContext
from attribution.names import MAX_NAME, check_system_name, check_text
from attribution.timeparse import UTC, TimeError, as_utc, parse_iso, resolve_zone

#: Fields context.yaml may carry (docs/bundle.md); anything else is refused so typos do not pass silently.
KNOWN_FIELDS = frozenset({
    "scheduler", "cluster", "job_id", "user", "partition", "state", "exit_code", "failed_node", "nodes",
    "tasks_per_node", "srun_tasks_per_node", "start", "end", "timezone", "boot_time", "gpus_per_node", "job_name",
})


def expand_nodes(value: Any, origin: str = "nodes") -> tuple[str, ...]:
    """A Slurm hostlist expression ('gpu[001-004,010]', 'rack[0-1]_blade[0-3]') or a list of names."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise InputError(origin, f"node list entry {item!r} is not a host name or hostlist")
        if not any(c in item for c in "[],"):  # a plain name (a stored context lists them: 512 per report)
            out.append(item.strip())
            continue
        try:
            out.extend(hostlist.expand_hostlist(item.strip()))
        except hostlist.BadHostlist as exc:
            raise InputError(origin, f"bad hostlist {item!r}: {exc}") from None
    seen: set[str] = set()
    unique = []
    for n in out:
        if n not in seen:
            seen.add(n)
            unique.append(n)
    return tuple(unique)


#: The context's names that are a cluster's or a node's, and those that are text (attribution/names.py).
SYSTEM_NAMES = ("cluster", "failed_node")
TEXT_NAMES = ("job_id", "user", "partition")


def _check_names(values: Mapping[str, Any], nodes: Iterable[Any], node_field: str, origin: str) -> None:
    for field in SYSTEM_NAMES:
        check_system_name(values.get(field), field, origin)
    for field in TEXT_NAMES:
        check_text(values.get(field), field, origin)
    for n in nodes:
        check_system_name(n, node_field, origin)


def check_storable(ctx: ExecutionContext, nodes: Iterable[str | None] = (), origin: str = "job context") -> None:
    """Refuse (InputError) a context, or event nodes, with names no real system has (attribution/names.py)."""
    _check_names({f: getattr(ctx, f) for f in (*SYSTEM_NAMES, *TEXT_NAMES)}, (*ctx.nodes, *nodes), "node", origin)


#: Years a job may run in: a context time outside them is a mistake or an attack, and would overflow the job
#: window's margins (year 9999) or predate every log (year 1).
YEARS = (1970, 2199)


def _time(value: Any, field: str, origin: str, zone) -> datetime | None:
    try:
        t = _any_time(value, field, origin, zone)
    except OverflowError:
        raise InputError(origin, f"{field}: {str(value)[:40]!r} is out of range") from None
    if t is not None and not YEARS[0] <= t.year <= YEARS[1]:
        raise InputError(origin, f"{field}: {t.year:04d} is not a year a job runs in ({YEARS[0]}..{YEARS[1]})")
    return t


def _any_time(value: Any, field: str, origin: str, zone) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return as_utc(value, zone)
    if isinstance(value, date):
        return as_utc(datetime(value.year, value.month, value.day), zone)
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise InputError(origin, f"{field}: {value!r} is not a time (seconds since 1970 out of range)") from None
    try:
        return parse_iso(str(value), zone)
    except TimeError:
        raise InputError(origin, f"{field}: {value!r} is not an ISO 8601 time") from None


def _int(value: Any, field: str, origin: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(origin, f"{field}: {value!r} is not a whole number")
    try:
        n = int(value)
    except ValueError:
        raise InputError(origin, f"{field}: {value!r} is not a whole number") from None
    if n <= 0:
        raise InputError(origin, f"{field}: must be positive, got {n}")
    return n


def normalize_state(value: Any) -> str:
    """Slurm's state word: 'CANCELLED by 1234' -> CANCELLED, 'TIMEOUT+' -> TIMEOUT."""
    if value is None:
        return "UNKNOWN"
    word = str(value).strip().split()[0] if str(value).strip() else "UNKNOWN"
    return word.rstrip("+").upper()


def context_from_mapping(data: dict, origin: str) -> ExecutionContext:
    """Build a context from an already-parsed mapping (context.yaml, the API, a connector)."""
    if not isinstance(data, dict):
        raise InputError(origin, "expected a mapping of context fields")
    unknown = sorted(map(str, set(data) - KNOWN_FIELDS))
    if unknown:
        raise InputError(origin, f"unknown field(s): {', '.join(map(str, unknown))}")
    for required in ("cluster", "job_id", "nodes"):
        if data.get(required) in (None, ""):
            raise InputError(origin, f"missing required field '{required}'")
    try:
        zone = resolve_zone(str(data.get("timezone") or "UTC"))
    except TimeError as exc:
        raise InputError(origin, f"timezone: {exc}") from None
    nodes = expand_nodes(data["nodes"], origin)
    if not nodes:
        raise InputError(origin, "nodes: empty node list")
    _check_names(data, nodes, "nodes", origin)
    boot = data.get("boot_time") or {}
    if not isinstance(boot, dict):
        raise InputError(origin, "boot_time: expected a mapping of node name to time")
    boot_time = {str(k): _time(v, f"boot_time.{k}", origin, zone) for k, v in boot.items()}
    start = _time(data.get("start"), "start", origin, zone)
    end = _time(data.get("end"), "end", origin, zone)
    if start and end and end < start:
        raise InputError(origin, f"end {end.isoformat()} is before start {start.isoformat()}")
    failed = data.get("failed_node")
    exit_code = data.get("exit_code")
    job_name = job_name_of(data.get("job_name"), origin)
    return ExecutionContext(
        scheduler=str(data.get("scheduler") or "static"),
        cluster=str(data["cluster"]),
        job_id=str(data["job_id"]),
        user=None if data.get("user") is None else str(data["user"]),
        partition=None if data.get("partition") is None else str(data["partition"]),
        state=normalize_state(data.get("state")),
        exit_code=None if exit_code is None else str(exit_code),
        failed_node=str(failed) if failed else None,
        nodes=nodes,
        tasks_per_node=_int(data.get("tasks_per_node"), "tasks_per_node", origin),
        srun_tasks_per_node=_int(data.get("srun_tasks_per_node"), "srun_tasks_per_node", origin),
        start=start,
        end=end,
        timezone=str(data.get("timezone") or "UTC"),
        boot_time={k: v for k, v in boot_time.items() if v is not None},
        gpus_per_node=_int(data.get("gpus_per_node"), "gpus_per_node", origin),
        job_name=job_name,
    )


def job_name_of(value: Any, origin: str = "context") -> str | None:
    """A job name as a context may carry it: any text the user chose (Slurm allows spaces and any character but
    NUL), at most MAX_NAME characters; empty is none."""
    if value is None or value == "":
        return None
    name = str(value)
    if len(name) > MAX_NAME:
        raise InputError(origin, f"job_name: a name of {len(name)} characters (at most {MAX_NAME})")
    if "\0" in name or any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise InputError(origin, "job_name: a NUL character or a lone surrogate (not storable text)")
    return name


def scheduler_job_name(value: Any) -> str | None:
    """A job name as a scheduler reports it (the epilog's environment, scontrol, sacct, a Kueue object): the same
    text as job_name_of keeps, cut to MAX_NAME characters and without NULs rather than refused (a name the user
    chose must not lose the job's report)."""
    if value is None:
        return None
    name = "".join(c for c in str(value) if c != "\0" and not 0xD800 <= ord(c) <= 0xDFFF)[:MAX_NAME]
    return name or None


def parse_context(text: str, origin: str = "context.yaml") -> ExecutionContext:
    """context.yaml text to an ExecutionContext. Pure."""
    import yaml  # here, not at the top: the node agent builds contexts from the environment, never from YAML

    try:
        data = yaml.safe_load(text)
    except (ValueError, OverflowError) as exc:  # a YAML timestamp like 2026-13-45 fails in the constructor
        raise InputError(origin, f"unreadable value: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(origin, f"malformed YAML: {problem}", line) from None
    if data is None:
        raise InputError(origin, "empty file")
    return context_from_mapping(data, origin)


#: A context is a few hundred bytes; a bigger one is not a context (and /dev/zero would never end).
MAX_CONTEXT_BYTES = 1 << 20


def load_context(path: Path) -> ExecutionContext:
    from attribution.safefile import open_regular

    try:
        with open_regular(path) as fp:
            raw = fp.read(MAX_CONTEXT_BYTES + 1)
        if len(raw) > MAX_CONTEXT_BYTES:
            raise InputError(str(path), f"larger than {MAX_CONTEXT_BYTES} bytes: not a context")
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start})") from None
    return parse_context(text, str(path))


def scheduler_observations(ctx: ExecutionContext) -> list:
    """The scheduler's own word on the job, as an observation the rules can read (e.g. NODE_FAIL on a node)."""
    from attribution.model import Observation

    text = f"job {ctx.job_id} state {ctx.state}"
    if ctx.failed_node:
        text += f" on {ctx.failed_node}"
    if ctx.exit_code:
        text += f" exit_code {ctx.exit_code}"
    return [Observation(source="scheduler", node=ctx.failed_node, location="context:state", text=text, line=text,
                        time=ctx.end)]
