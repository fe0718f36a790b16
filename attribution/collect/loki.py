"""Loki: a job's logs per node and source from `GET|POST /loki/api/v1/query_range` (docs/log-formats.md 6.1).

Loki returns at most `limit` entries per request, the oldest first with direction=forward (newest first with
backward), over [start, end) in nanoseconds. A full page means there may be more: the next page starts at the last
timestamp seen (forward) or ends just after it (backward), so entries that share that timestamp are not lost, and
the ones already seen are dropped. Each stream (label set) becomes one text, parsed by the same parsers as files;
a line without a time of its own gets the time Loki stored it with.

`parse_streams`, `stream_selector` and `Pager` are pure; `query_range` and `collect_loki` do the I/O and turn every
failure into a coverage record.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from string import Template
from typing import Callable, Iterable

from attribution import frozen
from attribution.config import LokiSettings
from attribution.errors import SourceError
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.httpclient import Endpoint, HttpError, post_form
from attribution.collect.joboutput import parse_job_output
from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
from attribution.collect.scan import Prefilter

UTC = timezone.utc
QUERY_RANGE = "/loki/api/v1/query_range"
NODE_SOURCES = ("kernel", "fabricmanager", "node")


class LokiAnswerError(SourceError):
    """An answer that is not a Loki streams result."""


@dataclass(frozen=True, slots=True)
class Stream:
    labels: tuple[tuple[str, str], ...]  # sorted
    entries: tuple[tuple[int, str], ...]  # (nanoseconds, line), in the order received

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)

    def selector(self) -> str:
        return "{" + ", ".join(f"{k}={logql_quote(v)}" for k, v in self.labels) + "}"


def logql_quote(value: str) -> str:
    """A LogQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def stream_selector(settings: LokiSettings, source: str, ctx: ExecutionContext, node: str | None = None) -> str:
    """The LogQL query for one source (and node): a configured template, or {<node>="n", <source>="kernel"}."""
    values = {"node": logql_quote(node or ""), "job_id": logql_quote(ctx.job_id),
              "cluster": logql_quote(ctx.cluster)}
    template = settings.selectors.get(source)
    if template:
        # a template writes $node where the quoted value goes: '{host=$node}'; "$node" inside quotes also works
        text = str(template)
        for name, quoted in values.items():
            text = text.replace(f'"${name}"', quoted).replace(f'"${{{name}}}"', quoted)
        return Template(text).safe_substitute(values)
    if source in NODE_SOURCES:
        return "{" + f"{settings.node_label}={values['node']}, {settings.source_label}={logql_quote(source)}" + "}"
    return "{" + f"{settings.job_label}={values['job_id']}, {settings.source_label}={logql_quote(source)}" + "}"


def parse_streams(body: bytes) -> list[Stream]:
    """A query_range answer to streams. Raises LokiAnswerError for anything else (a metric query, an error)."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise LokiAnswerError("answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        status = doc.get("status") if isinstance(doc, dict) else None
        err = doc.get("error") if isinstance(doc, dict) else None
        raise LokiAnswerError(f"status {status!r}" + (f": {err}" if err else ""))
    data = doc.get("data") or {}
    if not isinstance(data, dict) or data.get("resultType") != "streams":
        raise LokiAnswerError(f"resultType {data.get('resultType')!r}, expected 'streams' (a log query)")
    result = data.get("result") or []
    if not isinstance(result, list) or not all(isinstance(i, dict) for i in result):
        raise LokiAnswerError("result is not a list of streams")
    out = []
    for item in result:
        labels = item.get("stream") or {}
        values = item.get("values") or []
        if not isinstance(labels, dict) or not isinstance(values, list):
            raise LokiAnswerError("a stream has no label map or no list of values")
        entries = []
        for v in values:
            if not isinstance(v, list) or len(v) < 2:
                raise LokiAnswerError("an entry is not [timestamp, line]")
            try:
                ts = int(v[0])
            except (TypeError, ValueError):
                raise LokiAnswerError(f"timestamp {v[0]!r} is not nanoseconds") from None
            entries.append((ts, str(v[1])))
        out.append(Stream(tuple(sorted((str(k), str(x)) for k, x in labels.items())), tuple(entries)))
    return out


@dataclass
class Pager:
    """Walks [start, end) in pages of at most `limit` entries, dropping the repeats at page boundaries."""

    start: int
    end: int
    limit: int
    direction: str = "forward"
    max_entries: int = 2_000_000
    streams: dict = field(default_factory=dict)  # labels -> list of (ns, line)
    notes: list = field(default_factory=list)
    total: int = 0
    done: bool = False
    _edge: int | None = None
    _edge_keys: set = field(default_factory=set)

    def params(self, query: str) -> dict[str, str]:
        return {"query": query, "start": str(self.start), "end": str(self.end), "limit": str(self.limit),
                "direction": self.direction}

    def add_page(self, page: Iterable[Stream]) -> None:
        """Take one answer; afterwards `done` says whether everything in the window has been seen."""
        received = 0
        new = 0
        boundary: int | None = None
        at_boundary: list[tuple] = []
        for s in page:
            bucket = self.streams.setdefault(s.labels, [])
            for ts, line in s.entries:
                received += 1
                key = (s.labels, ts, line)
                if ts == self._edge and key in self._edge_keys:
                    continue
                bucket.append((ts, line))
                new += 1
                if boundary is None or (ts > boundary if self.direction == "forward" else ts < boundary):
                    boundary, at_boundary = ts, [key]
                elif ts == boundary:
                    at_boundary.append(key)
        self.total += new
        if received < self.limit:
            self.done = True  # not truncated: the rest of the window is empty
            return
        if self.total >= self.max_entries:
            self.notes.append(f"stopped after {self.total} entries (max_entries)")
            self.done = True
            return
        if new == 0 or boundary is None:
            # a full page of repeats: more than `limit` entries share one timestamp; step past it
            edge = self._edge if self._edge is not None else (self.start if self.direction == "forward" else self.end)
            self.notes.append(f"{self.limit} or more entries share the timestamp {edge} ns (the page size): "
                              f"some may not have been read")
            if self.direction == "forward":
                self.start = edge + 1
            else:
                self.end = edge
            self._edge, self._edge_keys = None, set()
        else:
            if boundary == self._edge:
                self._edge_keys.update(at_boundary)
            else:
                self._edge, self._edge_keys = boundary, set(at_boundary)
            if self.direction == "forward":
                self.start = boundary  # start is inclusive: the rest of this timestamp comes again
            else:
                self.end = boundary + 1  # end is exclusive
        if self.start >= self.end:
            self.done = True

    def ordered(self) -> list[tuple[tuple[tuple[str, str], ...], list[tuple[int, str]]]]:
        """Each stream's entries oldest first (entries of one timestamp in the order Loki keeps them)."""
        out = []
        for labels in sorted(self.streams):
            entries = self.streams[labels]
            if self.direction == "backward":
                entries = list(reversed(entries))
            out.append((labels, sorted(entries, key=lambda e: e[0])))
        return out


def query_range(endpoint: Endpoint, query: str, start: datetime, end: datetime, settings: LokiSettings,
                deadline: float, post: Callable = post_form) -> Pager:
    """Every entry of `query` in [start, end), page by page. Raises HttpError or LokiAnswerError."""
    pager = Pager(start=_ns(start), end=_ns(end), limit=settings.limit, direction=settings.direction,
                  max_entries=settings.max_entries)
    while not pager.done:
        body = post(endpoint, QUERY_RANGE, pager.params(query), deadline)
        pager.add_page(parse_streams(body))
    return pager


def _ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _from_ns(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1_000_000_000, UTC) + timedelta(microseconds=(ns % 1_000_000_000) // 1000)


def stream_where(labels: tuple[tuple[str, str], ...]) -> str:
    """The location of a stream's lines (`loki:{labels}`, then `:<line>`)."""
    return "loki:" + Stream(labels, ()).selector()


def stream_observations(labels: tuple[tuple[str, str], ...], entries: list[tuple[int, str]], source: str,
                        node: str | None, ctx: ExecutionContext, prefilter: Prefilter,
                        tap: Callable | None = None) -> list[Observation]:
    """One stream's entries through the parser of its source. Pure, but for `tap(text, 0, stamps)`, which sees
    the stream's text as parsed and the time of each of its lines (what is kept for replay)."""
    where = stream_where(labels)
    lines: list[str] = []
    stamps: list[int] = []
    for ts, line in entries:
        for part in line.split("\n"):
            lines.append(part)
            stamps.append(ts)
    data = ("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape")
    if tap is not None:
        tap(data, 0, stamps)
    raw = io.BytesIO(data)
    if source == "job":
        obs, _ = parse_job_output(raw, where, ctx, prefilter, file_node=node)
    else:
        obs, _ = parse_node_log(raw, NodeLogSpec(source, node or "", where), ctx, prefilter)
    out = []
    for o in obs:
        lineno = int(o.location.rsplit(":", 1)[1])
        ts = stamps[lineno - 1] if 0 < lineno <= len(stamps) else None
        if ts is not None and o.time is None:
            o = frozen.replace(o, time=_from_ns(ts))
        out.append(o)
    return out


def collect_loki(endpoint: Endpoint, settings: LokiSettings, ctx: ExecutionContext, prefilter_for,
                 start: datetime, end: datetime, deadline: float,
                 post: Callable = post_form, keeper=None) -> tuple[list[Observation], list[Coverage]]:
    """The configured sources of the job's nodes (and its job output) from Loki, with one coverage record each.
    `keeper` (replay.keep.LineKeeper): sees each stream as parsed, with its labels and times.

    After a request that could not reach the server (refused, timed out), the remaining queries are not tried:
    each is reported as an error at once, so a dead server costs one timeout, not one per node."""
    obs: list[Observation] = []
    cov: list[Coverage] = []
    down: str | None = None
    plan: list[tuple[str, str | None]] = []
    for source in settings.sources:
        if source in NODE_SOURCES:
            plan.extend((source, n) for n in ctx.nodes)
        else:
            plan.append((source, None))
    for source, node in plan:
        query = stream_selector(settings, source, ctx, node)
        where = f"loki {endpoint.describe()} {query}"
        if down is not None:
            cov.append(Coverage(source, node, "error", reason=f"not queried: {down}", file=where))
            continue
        if time.monotonic() >= deadline:
            down = "Loki time budget exhausted"
            cov.append(Coverage(source, node, "error", reason=down, file=where))
            continue
        try:
            pager = query_range(endpoint, query, start, end, settings, deadline, post)
        except HttpError as exc:
            if exc.transport:
                down = f"Loki unreachable ({exc.reason})"
            cov.append(Coverage(source, node, "error", reason=f"Loki: {exc.reason}", file=where))
            continue
        except LokiAnswerError as exc:
            cov.append(Coverage(source, node, "error", reason=f"Loki answer: {exc}", file=where))
            continue
        n_entries = 0
        pf = prefilter_for(source)
        for labels, entries in pager.ordered():
            n_entries += len(entries)
            stream_node = node
            if stream_node is None:
                stream_node = ctx.resolve_host(dict(labels).get(settings.node_label))
            tap = None if keeper is None else keeper.stream_tap("loki", source, stream_node, stream_where(labels),
                                                                dict(labels))
            obs.extend(stream_observations(labels, entries, source, stream_node, ctx, pf, tap))
        status = "ok" if n_entries else "empty"
        cov.append(Coverage(source, node, status, lines=n_entries, file=where,
                            reason=None if n_entries else "no entries in the job window",
                            notes=tuple(pager.notes)))
    return obs, cov


__all__ = ["Stream", "Pager", "LokiAnswerError", "logql_quote", "stream_selector", "parse_streams", "query_range",
           "stream_where", "stream_observations", "collect_loki"]
