"""Metric rules: which changes of a metric series are fault events. Pure, like extract.

The rules are data (`type: metric_rules`, rules/metrics.yaml, validated by rulepack). Each names a metric, the
label that holds the node (and the GPU's PCI bus id, index, UUID), a trigger and what the event is:

- `increase`: a counter went up by at least `min_increase` between two samples. A drop is a counter reset (a
  driver reload); what the counter shows after the reset is the increase.
- `change_to_nonzero`: a gauge that keeps its last value (DCGM_FI_DEV_XID_ERRORS holds the last Xid until the
  exporter or driver restarts) took a new value other than 0. The value the window opens with is a baseline,
  never an event, and the same value again is never an event: a stuck value is reported once, when it appears.

The event's kind comes from the rule, or from a catalog lookup of the sample value (`catalog: xid`), so a DCGM
Xid 79 becomes the same `gpu_fallen_off_bus` as a kernel `NVRM: Xid ... 79` line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from attribution import frozen
from attribution.errors import Problem
from attribution.extract.events import normalize_gpu
from attribution.samples import MetricSeries
from attribution.model import Event, ExecutionContext
from attribution.rulepack.values import MetricRule, RuleSet

UTC = timezone.utc
LABEL_ROLES = ("node", "gpu", "gpu_index", "uuid")
TRIGGERS = ("increase", "change_to_nonzero")


@dataclass(frozen=True, slots=True)
class Change:
    """One step of a series at which its rule fires."""

    index: int
    time: float
    previous: float | None
    value: float
    increase: float | None = None


def metric_rules(ruleset: RuleSet, label_overrides: Mapping[str, str] | None = None) -> tuple[MetricRule, ...]:
    """The metric rules of a loaded pack, with label names from the pack, the rule, then the configuration."""
    if not label_overrides:
        return ruleset.metric_rules
    return tuple(frozen.replace(r, labels=MappingProxyType({**r.labels, **dict(label_overrides)}))
                 for r in ruleset.metric_rules)


def changes(trigger: str, samples: Iterable[tuple[float, float]], min_increase: float = 1.0) -> list[Change]:
    """The steps of a series at which `trigger` fires. NaN samples (no data) are skipped."""
    out: list[Change] = []
    last: float | None = None
    for i, (t, v) in enumerate(samples):
        if math.isnan(v):
            continue
        if last is None:
            last = v  # the value the window opens with: a baseline, not an event
            continue
        if trigger == "change_to_nonzero":
            if v != last and v != 0:
                out.append(Change(i, t, last, v))
        elif trigger == "increase":
            inc = v - last if v >= last else v  # a drop is a counter reset
            if inc >= min_increase:
                out.append(Change(i, t, last, v, inc))
        else:  # the schema allows nothing else
            raise ValueError(f"unknown trigger {trigger!r}")
        last = v
    return out


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _fmt_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def evaluate(ruleset: RuleSet, ctx: ExecutionContext, rules: Iterable[MetricRule],
             series: Iterable[MetricSeries]) -> list[Event]:
    """Every event the metric rules find in the series of the job's nodes, in the engine's total order."""
    by_metric: dict[str, list[MetricRule]] = {}
    for r in rules:
        by_metric.setdefault(r.metric, []).append(r)
    out: list[Event] = []
    for s in series:
        for rule in by_metric.get(s.name, ()):
            out.extend(_events(ruleset, ctx, rule, s))
    out.sort(key=Event.sort_key)
    return out


def _events(ruleset: RuleSet, ctx: ExecutionContext, rule: MetricRule, s: MetricSeries) -> list[Event]:
    node_label = rule.label("node")
    node = ctx.resolve_host(s.labels.get(node_label)) if node_label else None
    if node is None:
        return []  # not one of this job's nodes
    gpu_label, index_label, uuid_label = rule.label("gpu"), rule.label("gpu_index"), rule.label("uuid")
    gpu = normalize_gpu(s.labels.get(gpu_label)) if gpu_label else None
    shown = tuple(x for x in (node_label, index_label, gpu_label, uuid_label) if x)
    where = s.selector(shown)
    base_fields: dict[str, str] = {"metric": s.name}
    if index_label and s.labels.get(index_label) is not None:
        base_fields["gpu_index"] = s.labels[index_label]
    if uuid_label and s.labels.get(uuid_label):
        base_fields["gpu_uuid"] = s.labels[uuid_label]
    out = []
    for ch in changes(rule.trigger, s.samples, rule.min_increase):
        made = _kind_of(ruleset, rule, ch.value)
        if made is None:
            continue
        kind, code, action, severity, extra = made
        spec = ruleset.kinds[kind]
        if ch.increase is not None:
            text = f"{where} increased by {_num(ch.increase)} to {_num(ch.value)}"
        else:
            text = f"{where} changed from {_num(ch.previous)} to {_num(ch.value)}"
        fields = dict(base_fields)
        fields.update(extra)
        fields["value"] = _num(ch.value)
        if ch.previous is not None:
            fields["previous"] = _num(ch.previous)
        out.append(Event(
            kind=kind, role=rule.role or spec.role, rule=rule.id, source="metrics",
            location=f"{s.origin}:{where}@{_fmt_time(ch.time)}", line=text, message=text, node=node, gpu=gpu,
            code=code, time=datetime.fromtimestamp(ch.time, UTC), outcome=spec.outcome,
            action=action or spec.action, severity=severity or spec.severity, fields=fields))
    return out


def _kind_of(ruleset: RuleSet, rule: MetricRule, value: float):
    """(kind, code, action, severity, fields) of an event, from the rule or from a catalog entry of the value."""
    if rule.catalog is None:
        return rule.kind, rule.code, rule.action, rule.severity, {}
    if not float(value).is_integer():
        return None
    code = int(value)
    entry = ruleset.catalogs[rule.catalog].lookup(code)
    if entry is None:
        return None
    kind, action, severity = entry.kind, entry.action or rule.action, entry.severity or rule.severity
    fields: dict[str, str] = {}
    if entry.mnemonic:
        fields["mnemonic"] = entry.mnemonic
    probe = {"text": ""}
    for v in entry.variants:  # a metric carries no message text: only variants that need none can apply
        if v.applies(probe):
            kind, action, severity = v.kind, v.action or action, v.severity or severity
            break
    return kind, code, action, severity, fields


# -- the rules' own examples ---------------------------------------------------------------------------------

EXAMPLE_STEP = 15.0
EXAMPLE_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def example_series(rule: MetricRule, example: Mapping[str, Any], node: str) -> MetricSeries:
    labels: dict[str, str] = {}
    defaults = {"node": node, "gpu": "00000000:3B:00.0", "gpu_index": "0",
                "uuid": "GPU-00000000-0000-0000-0000-000000000000"}
    for role, value in defaults.items():
        if rule.label(role):
            labels[rule.label(role)] = value
    labels.update(example.get("labels") or {})
    samples = tuple((EXAMPLE_START + i * EXAMPLE_STEP, float(v)) for i, v in enumerate(example["values"]))
    return MetricSeries(rule.metric, labels, samples, origin="example")


def check_examples(ruleset: RuleSet, ctx: ExecutionContext) -> list[Problem]:
    """Every metric rule's examples, run through `evaluate`: a `Problem` (path, message) each."""
    problems: list[Problem] = []
    rules = metric_rules(ruleset)
    for rule in rules:
        for n, ex in enumerate(rule.examples):
            series = example_series(rule, ex, ctx.nodes[0])
            got = [e for e in evaluate(ruleset, ctx, [rule], [series]) if e.rule == rule.id]
            want = list(ex["expect"])
            where = f"metric rule {rule.id}: example {n + 1} (values {list(ex['values'])})"
            if len(got) != len(want):
                problems.append(Problem(rule.path, None, f"{where}: gives {len(got)} event(s) "
                                        f"{[(_step(e), e.kind, e.code) for e in got]}, expected {len(want)}"))
                continue
            for ev, exp in zip(got, want):
                bad = _mismatch(ev, exp)
                if bad:
                    problems.append(Problem(rule.path, None, f"{where}: {bad}"))
    return problems


def _step(ev: Event) -> int:
    return int(round((ev.time.timestamp() - EXAMPLE_START) / EXAMPLE_STEP)) if ev.time else -1


def _mismatch(ev: Event, exp: Mapping[str, Any]) -> str | None:
    for key, want in exp.items():
        if key == "step":
            have: Any = _step(ev)
        elif key == "gpu":
            have, want = ev.gpu, normalize_gpu(want) if want is not None else None
        else:
            have = getattr(ev, key)
        if have != want:
            return f"{key} is {have!r}, expected {want!r}"
    return None


__all__ = ["MetricRule", "Change", "metric_rules", "changes", "evaluate", "check_examples", "LABEL_ROLES",
           "TRIGGERS"]
