"""The per-job bounds of the evidence kept for replay (docs/replay.md), shared by the line keeper (replay.keep) and
the kept connector streams and metric series (replay.streams): how many lines and bytes, and the nodes whose
counter snapshots and metric series fit."""

from __future__ import annotations

import json
from typing import Mapping

from attribution.frozen import Value
from attribution.serialize import EVIDENCE_MAX_BYTES, EVIDENCE_MAX_LINE_CHARS, EVIDENCE_MAX_LINES

#: Bounds per job: the kept lines, their text, one line's length, the telemetry snapshots.
MAX_LINES = EVIDENCE_MAX_LINES
MAX_BYTES = EVIDENCE_MAX_BYTES
MAX_LINE_CHARS = EVIDENCE_MAX_LINE_CHARS
MAX_TELEMETRY_BYTES = 4 << 20  # of snapshot JSON: ~20 KiB a node of 8 GPUs and 8 HCAs, ~1 KiB compressed
MAX_METRIC_BYTES = 4 << 20  # of PromQL series JSON (only the samples where a value changes: streams.py)


class Limits(Value):
    """The per-job bounds of the kept evidence."""

    lines: int = MAX_LINES
    bytes: int = MAX_BYTES
    line_chars: int = MAX_LINE_CHARS
    telemetry_bytes: int = MAX_TELEMETRY_BYTES
    metric_bytes: int = MAX_METRIC_BYTES


def fit_by_node(by_node: Mapping[str, object], budget: int) -> tuple[dict, bool]:
    """The nodes whose JSON fits in `budget` bytes in all, taken in node order (one that does not fit is left out
    whole, a later smaller one may still fit); and whether any was left out."""
    out: dict = {}
    left = budget
    cut = False
    for node, value in sorted(by_node.items()):
        size = len(json.dumps(value, separators=(",", ":")))
        if size > left:
            cut = True
            continue
        left -= size
        out[node] = value
    return out, cut


def bound_telemetry(phases_by_node: Mapping[str, Mapping], limits: Limits = Limits()) -> dict:
    """keep_telemetry on snapshots already in their JSON form."""
    out, cut = fit_by_node(phases_by_node, limits.telemetry_bytes)
    return {"telemetry": {node: dict(phases) for node, phases in out.items()}} | (
        {"telemetry_truncated": True} if cut else {})


def bound_metrics(by_node: Mapping[str, list], labels: Mapping[str, str], limits: Limits) -> dict:
    """The nodes whose series fit in `limits.metric_bytes`, in node order; `metrics_truncated` when some did not."""
    out, cut = fit_by_node(by_node, limits.metric_bytes)
    return {"metrics": {"labels": dict(labels), "nodes": {node: list(series) for node, series in out.items()}}} | (
        {"metrics_truncated": True} if cut else {})


__all__ = ["MAX_LINES", "MAX_BYTES", "MAX_LINE_CHARS", "MAX_TELEMETRY_BYTES", "MAX_METRIC_BYTES", "Limits",
           "fit_by_node", "bound_telemetry", "bound_metrics"]
