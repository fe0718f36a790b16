"""The kept form of what the live connectors read (docs/replay.md): Loki streams, pod logs, files and job output
read by path, and PromQL series; and replaying it.

A connector's lines carry what decides their meaning outside the text: a Loki entry's time (nanoseconds, taken
by a line that has no time of its own) and its stream's labels (the location, and so the fingerprint; the node
of a job stream), the source the connector read them as (which parser, and the trust mark: a `job` stream is
user-written), the node it read them for. So each is kept as a stream, not as a bundle file:

    {"reader": "loki", "source": "kernel", "node": "g01", "location": "loki:{host=\"g01\", ...}",
     "labels": {...}, "lines": [[line number, text, flags, ns], ...]}
    {"reader": "text", "source": "job", "node": "g01", "location": "pod/w-0/pytorch", "lines": [[n, text, flags]]}

(replay.keep.LineKeeper.stream_tap keeps them, bounded with the job's other lines), and replayed by running the
connector's own parser on the kept lines at their line numbers, with the kept times and labels, at the kept
location: the observations are the ones the connector gave.

PromQL series are kept per node (the node the metric rules' node label names), only the samples at which the
value changes (the first one, then each that differs from the one before; NaN, no data, dropped): the metric rules'
triggers (`increase` with a minimum above 0, `change_to_nonzero`) fire on exactly the same samples. Bounded like
the counter snapshots: at most 4 MiB of series JSON per job, a node that does not fit is left out
(`metrics_truncated`)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from attribution.model import Event, ExecutionContext, Observation
from attribution.replay.bounds import Limits, bound_metrics

if TYPE_CHECKING:
    from attribution.rulepack.values import RuleSet
    from attribution.samples import MetricSeries

#: Never pad a stream past this line number (a kept line further down is dropped), as pipeline.rederive.MAX_LINENO.
MAX_LINENO = 20_000_000


def compact_samples(samples: Iterable[tuple[float, float]]) -> list[list[float]]:
    """The samples at which the value changes (the first, then each that differs from the last kept); no NaN."""
    out: list[list[float]] = []
    last: float | None = None
    for t, v in samples:
        if math.isnan(v) or (last is not None and v == last):
            continue
        out.append([t, v])
        last = v
    return out


def series_node(s: MetricSeries, rules, ctx: ExecutionContext) -> str | None:
    """The job's node a series belongs to, by the node label of the metric rules that read it."""
    for r in rules:
        label = r.label("node") if r.metric == s.name else None
        node = ctx.resolve_host(s.labels.get(label)) if label else None
        if node is not None:
            return node
    return None


def keep_metrics(series: Iterable[MetricSeries], rules, ctx: ExecutionContext,
                 labels: Mapping[str, str] | None, limits: Limits) -> dict:
    """{"metrics": {"labels": the configured label names, "nodes": {node: [series]}}} within the bound."""
    by_node: dict[str, list[dict]] = {}
    for s in series:
        node = series_node(s, rules, ctx)
        if node is not None:
            by_node.setdefault(node, []).append({"name": s.name, "labels": dict(sorted(s.labels.items())),
                                                 "origin": s.origin, "samples": compact_samples(s.samples)})
    return bound_metrics(by_node, labels or {}, limits) if by_node else {}


def metric_nodes(doc: Mapping) -> set[str]:
    """The nodes whose metric series are kept: their metric events are the replayed ones."""
    return set(((doc.get("metrics") or {}).get("nodes") or {}))


def metric_events(ruleset: RuleSet, ctx: ExecutionContext, doc: Mapping) -> list[Event]:
    """The events `ruleset`'s metric rules find in the kept series."""
    from attribution.extract.metrics import evaluate, metric_rules
    from attribution.samples import MetricSeries

    kept = doc.get("metrics") or {}
    series = [MetricSeries(s["name"], s["labels"], tuple((t, v) for t, v in s["samples"]), origin=s["origin"])
              for node in sorted(kept.get("nodes") or {}) for s in kept["nodes"][node]]
    if not series:
        return []
    return evaluate(ruleset, ctx, metric_rules(ruleset, kept.get("labels") or None), series)


def _padded(lines: list) -> Iterator[tuple[int | None, str]]:
    """(ns, text) of every line from 1 to the last kept one: the kept ones at their numbers, blank in between."""
    at = 1
    for ln in lines:
        lineno = ln[0]
        if lineno < at or lineno > MAX_LINENO:
            continue
        for _ in range(lineno - at):
            yield None, ""
        yield (ln[3] if len(ln) > 3 else None), ln[1].replace("\n", " ")
        at = lineno + 1


def stream_locations(doc: Mapping) -> set[str]:
    return {s["location"] for s in doc.get("streams", ())}


def replay_streams(doc: Mapping, ctx: ExecutionContext, prefilter_for: Callable) -> list[Observation]:
    """The observations the connectors' parsers give on the kept streams (with `prefilter_for(source)`)."""
    from attribution.collect.joboutput import parse_job_output
    from attribution.collect.loki import stream_observations
    from attribution.collect.nodelogs import NodeLogSpec, parse_node_log

    out: list[Observation] = []
    for s in doc.get("streams", ()):
        source, node, where, pf = s["source"], s.get("node"), s["location"], prefilter_for(s["source"])
        lines = list(_padded(s["lines"]))
        if s["reader"] == "loki":
            labels = tuple(sorted((str(k), str(v)) for k, v in (s.get("labels") or {}).items()))
            out += stream_observations(labels, [(ns or 0, text) for ns, text in lines], source, node, ctx, pf)
            continue
        raw = io.BytesIO("".join(text + "\n" for _, text in lines).encode("utf-8", errors="surrogateescape"))
        if source == "job":
            out += parse_job_output(raw, where, ctx, pf, file_node=node)[0]
        else:
            out += parse_node_log(raw, NodeLogSpec(source, node or "", where), ctx, pf)[0]
    return out
