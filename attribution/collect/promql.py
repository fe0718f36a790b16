"""Prometheus: the metric rules' series of the job's nodes over the job window, from `/api/v1/query_range`
(docs/log-formats.md 6.2). The collector only fetches samples; the metric rules say what they mean.

`series_query`, `choose_step` and `parse_matrix` are pure; `collect_metrics` does the I/O and reports one coverage
record per node: ok (series seen for it), empty (none: no exporter there, or other label names) or error.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime
from typing import Callable, Iterable

from attribution.config import PrometheusSettings
from attribution.errors import SourceError
from attribution.samples import MetricSeries
from attribution.model import Coverage, ExecutionContext
from attribution.collect.httpclient import Endpoint, HttpError, post_form

QUERY_RANGE = "/api/v1/query_range"
MAX_POINTS = 11000  # Prometheus refuses more points per series than this


class PromAnswerError(SourceError):
    """An answer that is not a Prometheus matrix."""


def _regex_escape(name: str) -> str:
    """A node name as a literal inside a PromQL (RE2) regex inside a double-quoted string."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", name)


def series_query(metric: str, node_label: str, nodes: Iterable[str], matchers: str | None = None) -> str:
    """`METRIC{Hostname=~"(n1|n2)(\\..*)?"}`: the metric on the job's nodes, short or fully qualified."""
    alts = "|".join(_regex_escape(n) for n in sorted(set(nodes)))
    inner = f'{node_label}=~"({alts})(\\\\..*)?"'
    if matchers:
        inner += ", " + matchers.strip().strip("{}").strip()
    return f"{metric}{{{inner}}}"


def choose_step(start: datetime, end: datetime, step: float) -> float:
    """The configured step, raised when the window would give more points than Prometheus allows."""
    span = max(0.0, (end - start).total_seconds())
    return max(float(step), math.ceil(span / MAX_POINTS) if span else float(step))


def parse_matrix(body: bytes, origin: str = "prometheus") -> list[MetricSeries]:
    try:
        doc = json.loads(body)
    except ValueError:
        raise PromAnswerError("answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise PromAnswerError(f"status {doc.get('status') if isinstance(doc, dict) else '?'}"
                              + (f": {err}" if err else ""))
    data = doc.get("data") or {}
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PromAnswerError(f"resultType {data.get('resultType') if isinstance(data, dict) else None!r}, "
                              f"expected 'matrix'")
    result = data.get("result") or []
    if not isinstance(result, list) or not all(isinstance(i, dict) and isinstance(i.get("metric") or {}, dict)
                                               and isinstance(i.get("values") or [], list) for i in result):
        raise PromAnswerError("result is not a list of series")
    out = []
    for item in result:
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        name = labels.pop("__name__", "")
        samples = []
        for pair in item.get("values") or []:
            try:
                samples.append((float(pair[0]), float(pair[1])))  # values are strings: "NaN", "+Inf" included
            except (TypeError, ValueError, IndexError):
                raise PromAnswerError(f"sample {pair!r} is not [time, \"value\"]") from None
        out.append(MetricSeries(name, labels, tuple(samples), origin=origin))
    return out


def collect_metrics(endpoint: Endpoint, settings: PrometheusSettings, rules, ctx: ExecutionContext,
                    start: datetime, end: datetime, deadline: float,
                    post: Callable = post_form) -> tuple[list[MetricSeries], list[Coverage]]:
    """The series of every metric rule for the job's nodes; one coverage record per node."""
    step = choose_step(start, end, settings.step)
    series: list[MetricSeries] = []
    errors: list[str] = []
    down: str | None = None
    by_query: dict[str, list] = {}
    for rule in rules:
        node_label = rule.label("node")
        if node_label:
            by_query.setdefault(series_query(rule.metric, node_label, ctx.nodes, settings.matchers), []).append(rule)
    samples_per_node: dict[str, int] = {}
    for query, rs in by_query.items():
        if down is not None:
            errors.append(f"{rs[0].metric}: not queried: {down}")
            continue
        if time.monotonic() >= deadline:
            down = "Prometheus time budget exhausted"
            errors.append(f"{rs[0].metric}: {down}")
            continue
        params = {"query": query, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                  "step": f"{step:g}", "timeout": f"{max(1, int(endpoint.timeout))}s"}
        try:
            got = parse_matrix(post(endpoint, QUERY_RANGE, params, deadline), origin="prometheus")
        except HttpError as exc:
            if exc.transport:
                down = f"Prometheus unreachable ({exc.reason})"
            errors.append(f"{rs[0].metric}: {exc.reason}")
            continue
        except PromAnswerError as exc:
            errors.append(f"{rs[0].metric}: {exc}")
            continue
        node_label = rs[0].label("node")
        for s in got:
            node = ctx.resolve_host(s.labels.get(node_label))
            if node is not None:
                samples_per_node[node] = samples_per_node.get(node, 0) + len(s.samples)
        series.extend(got)
    where = f"prometheus {endpoint.describe()}"
    cov = []
    for node in ctx.nodes:
        n = samples_per_node.get(node, 0)
        if errors:
            cov.append(Coverage("metrics", node, "error", lines=n, file=where,
                                reason=f"{len(errors)} of {len(by_query)} queries failed: {errors[0]}",
                                notes=tuple(errors[1:4])))
        elif n:
            cov.append(Coverage("metrics", node, "ok", lines=n, file=where))
        else:
            cov.append(Coverage("metrics", node, "empty", file=where,
                                reason=f"no series for this node in {len(by_query)} metric(s)"))
    return series, cov


__all__ = ["PromAnswerError", "series_query", "choose_step", "parse_matrix", "collect_metrics"]
