"""Counter rules: which change of a counter between the prolog's and the epilog's snapshot is a fault event. Pure.

The rules are data (`type: counter_rules`, rules/counters.yaml, validated by rulepack). Each names a device type
(`gpu`, `ib_port`, `pci`), the counters it watches, a trigger and the event's kind:

- `increase`: a counter grew by at least `min_increase` between the snapshots. A drop is a reset (a driver reload
  clears the volatile ECC counts, a port reset clears its counters): what it shows after it is the increase.
- `set`: a Yes/No status (remapped_rows.pending, reset.required) was No at the prolog and Yes at the epilog.
- `vanished`: the device was in the prolog's snapshot and is not in the epilog's, whose tool still answered (or,
  for a GPU, the tool failed naming it as unreachable): a GPU that fell off the bus. `counters` name the values
  the event quotes from the prolog (what the device last counted).
- `said` (GPUs): a line the GPU tool printed beside its document (its stderr, a warning on the stream of its XML)
  matches `pattern`. `gpus: named`: the event is about the GPU the pattern's `gpu` group names (the line is
  evidence about that GPU, which is not lost for it); new at the epilog it is evidence about the job, there at
  both snapshots it is context. `gpus: listed`: every GPU the prolog's snapshot listed that the epilog's does not
  ("No devices were found": every GPU is gone).

One event per rule and device, however many of its counters changed (the event lists them all). With both
snapshots the event is evidence about the job, placed at the job start (the counter grew at some time during the
job; the earliest it could have is what lets it explain the job's symptoms). With one side missing, nothing is
known about the job: a watched counter that is not zero becomes a `context` event (absolute value only).
Counters are written by the system (the driver, the kernel), never by the job: the events' evidence is `system`.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from attribution.frozen import Value
from attribution.samples import Snapshot
from attribution.extract.events import normalize_gpu
from attribution.model import Event, ExecutionContext
from attribution.rulepack.values import RuleSet

DEVICES = ("gpu", "ib_port", "pci")
SOURCE_OF = {"gpu": "nvidia-smi", "ib_port": "infiniband", "pci": "pci"}
TELEMETRY_SOURCE = "telemetry"


class CounterRule(Value):
    """A counter rule: which device's counters, the trigger, the event kind it makes."""

    id: str
    device: str
    counters: tuple[str, ...]
    trigger: str
    kind: str
    min_increase: float = 1.0
    where: str | None = None
    pattern: str | None = None
    gpus: str | None = None
    role: str | None = None
    action: str | None = None
    severity: str | None = None
    examples: tuple[Mapping[str, Any], ...] = ()
    path: str = ""


class CounterChange(Value):
    """One watched counter's values at the prolog and the epilog, and its increase."""

    counter: str
    before: float | None
    after: float
    increase: float | None = None


def counter_rules(ruleset: RuleSet) -> tuple[CounterRule, ...]:
    out = []
    for shown, data in ruleset.document("counter_rules"):
        for r in data["rules"]:
            out.append(CounterRule(
                id=r["id"], device=r["device"], counters=tuple(r.get("counters", ())), trigger=r["trigger"],
                kind=r["kind"], min_increase=float(r.get("min_increase", 1)), where=r.get("where"),
                pattern=r.get("pattern"), gpus=r.get("gpus"), role=r.get("role"),
                action=r.get("action"), severity=r.get("severity"),
                examples=tuple(MappingProxyType(dict(e)) for e in r["examples"]), path=shown))
    return tuple(out)


def watched(ruleset: RuleSet) -> dict[str, set[str]]:
    """Every counter some rule reads, by device type (what the hooks' cheap comparison must cover)."""
    out: dict[str, set[str]] = {d: set() for d in DEVICES}
    for r in counter_rules(ruleset):
        out[r.device].update(r.counters)
    return out


def _changes(rule: CounterRule, before: Mapping[str, float], after: Mapping[str, float]) -> list[CounterChange]:
    out = []
    for c in rule.counters:
        if c not in after:
            continue
        a, b = after[c], before.get(c)
        if rule.trigger == "set":
            if a == 1 and b == 0:
                out.append(CounterChange(c, b, a))
        elif b is not None:
            inc = a - b if a >= b else a  # a drop is a reset
            if inc >= rule.min_increase:
                out.append(CounterChange(c, b, a, inc))
    return out


def _absolute(rule: CounterRule, values: Mapping[str, float]) -> list[CounterChange]:
    need = 1 if rule.trigger == "set" else rule.min_increase
    return [CounterChange(c, None, values[c]) for c in rule.counters if c in values and values[c] >= need]


def _num(v: float | None) -> str:
    if v is None:
        return "?"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _has(s: Snapshot | None, device: str) -> bool:
    return s is not None and SOURCE_OF[device] in s.present


def _vanished(rule: CounterRule, prolog: Snapshot | None, epilog: Snapshot | None) -> list[tuple[str, str]]:
    """(device, how) for each device the prolog's snapshot listed and the epilog's no longer does: absent from a
    listing its tool produced, or (GPUs) named by the tool as unreachable when it failed. With no prolog
    snapshot only the tool's own word is left: those GPUs, as (device, "unreachable")."""
    out: list[tuple[str, str]] = []
    if epilog is None:
        return out
    lost = set(epilog.lost) if rule.device == "gpu" else set()
    if not _has(prolog, rule.device):
        return sorted((g, "unreachable") for g in lost)
    assert prolog is not None
    before, after = prolog.devices(rule.device), epilog.devices(rule.device)
    for key in sorted(before):
        if key in lost:
            out.append((key, "unreachable"))
        elif _has(epilog, rule.device) and key not in after:
            out.append((key, "absent"))
    return out


def evaluate(ruleset: RuleSet, ctx: ExecutionContext, node: str, prolog: Snapshot | None,
             epilog: Snapshot | None, rules: Iterable[CounterRule] | None = None) -> list[Event]:
    """Every event the counter rules find in one node's two snapshots (either may be None)."""
    rules = counter_rules(ruleset) if rules is None else tuple(rules)
    topo = epilog if epilog is not None else prolog
    out: list[Event] = []
    for rule in rules:
        if rule.trigger == "said":
            out.extend(_said_events(ruleset, ctx, node, rule, prolog, epilog))
            continue
        if rule.trigger == "vanished":
            for key, how in _vanished(rule, prolog, epilog):
                gpu = _gpu(rule, key, topo) or _gpu(rule, key, prolog)
                if rule.device == "pci" and rule.where is not None and (gpu is not None) != (rule.where == "gpu_path"):
                    continue
                phase = None if _has(prolog, rule.device) else "epilog"
                out.append(_gone_event(ruleset, ctx, node, rule, key, gpu, how, prolog, phase))
            continue
        both = _has(prolog, rule.device) and _has(epilog, rule.device)
        if both:
            assert prolog is not None and epilog is not None
            before_all, after_all = prolog.devices(rule.device), epilog.devices(rule.device)
            keys = sorted(set(before_all) & set(after_all))
        else:
            side = epilog if _has(epilog, rule.device) else prolog if _has(prolog, rule.device) else None
            if side is None:
                continue
            keys = sorted(side.devices(rule.device))
        for key in keys:
            gpu = _gpu(rule, key, topo)
            if rule.device == "pci" and rule.where is not None:
                if (gpu is not None) != (rule.where == "gpu_path"):
                    continue
            if both:
                ch = _changes(rule, before_all[key], after_all[key])
                phase = None
            else:
                ch = _absolute(rule, side.devices(rule.device)[key])
                phase = side.phase
            if ch:
                out.append(_event(ruleset, ctx, node, rule, key, gpu, ch, phase))
    out.sort(key=Event.sort_key)
    return out


def _said(rule: CounterRule, s: Snapshot | None) -> dict[str, str]:
    """{GPU (or "" for a line that names none): the first line of `s`'s tool messages the rule's pattern finds}."""
    out: dict[str, str] = {}
    if s is None or not rule.pattern:
        return out
    rx = re.compile(rule.pattern)
    for line in s.messages:
        m = rx.search(line)
        if m is None:
            continue
        key = normalize_gpu(m.groupdict().get("gpu") or "") or "" if rule.gpus == "named" else ""
        out.setdefault(key, line)
    return out


def _said_events(ruleset: RuleSet, ctx: ExecutionContext, node: str, rule: CounterRule, prolog: Snapshot | None,
                 epilog: Snapshot | None) -> list[Event]:
    side = epilog if epilog is not None else prolog
    said = _said(rule, side)
    if not said:
        return []
    out: list[Event] = []
    if rule.gpus == "listed":
        line = next(iter(said.values()))
        if side is epilog and _has(prolog, rule.device):
            assert prolog is not None and epilog is not None
            gone = sorted(set(prolog.gpus) - set(epilog.gpus))
            for key in gone:
                out.append(_gone_event(ruleset, ctx, node, rule, key, normalize_gpu(key), f"said:{line}", prolog,
                                       None))
            return out
        spec = ruleset.kinds[rule.kind]
        text = f"the {side.phase}'s nvidia-smi said \"{line}\" (no prolog listing: not known to be this job's)"
        return [Event(kind=rule.kind, role="context", rule=rule.id, source=TELEMETRY_SOURCE,
                      location=f"nodes/{node}/telemetry/{side.phase}:nvidia-smi", line=text, message=text,
                      node=node, gpu=None, time=ctx.end if side is epilog else ctx.start, outcome=spec.outcome,
                      action=rule.action or spec.action, severity=rule.severity or spec.severity,
                      fields={"evidence": "system", "said": line, "window": f"{side.phase} only"})]
    both = side is epilog and prolog is not None
    before = _said(rule, prolog) if both else {}
    for key in sorted(said):
        state = ("before" if key in before else "new") if both else "alone"
        out.append(_said_event(ruleset, ctx, node, rule, key, said[key], state, side.phase))
    return out


def _said_event(ruleset: RuleSet, ctx: ExecutionContext, node: str, rule: CounterRule, key: str, line: str,
                state: str, phase: str) -> Event:
    """state: new (the epilog's tool said it, the prolog's did not), before (both did), alone (one snapshot)."""
    spec = ruleset.kinds[rule.kind]
    what = f"GPU {key}" if key else "nvidia-smi"
    fields: dict[str, str] = {"evidence": "system", "device": key or "nvidia-smi", "said": line}
    if state == "new":
        text = f"{what}: the epilog's nvidia-smi said \"{line}\", the prolog's did not"
        role, time, where = rule.role or spec.role, ctx.start, "prolog..epilog"
        fields["window"] = "job"
    elif state == "before":
        text = f"{what}: nvidia-smi said \"{line}\" at the prolog and at the epilog (from before the job)"
        role, time, where = "context", ctx.start, "prolog"
        fields["window"] = "before the job"
    else:
        other = "prolog" if phase == "epilog" else "epilog"
        text = f"{what}: the {phase}'s nvidia-smi said \"{line}\" (no {other} snapshot: not known to be this job's)"
        role, time, where = "context", ctx.end if phase == "epilog" else ctx.start, phase
        fields["window"] = f"{phase} only"
    return Event(kind=rule.kind, role=role, rule=rule.id, source=TELEMETRY_SOURCE,
                 location=f"nodes/{node}/telemetry/{where}:{key or 'nvidia-smi'}", line=text, message=text, node=node,
                 gpu=key or None, time=time, outcome=spec.outcome, action=rule.action or spec.action,
                 severity=rule.severity or spec.severity, fields=fields)


def _gpu(rule: CounterRule, key: str, topo: Snapshot | None) -> str | None:
    if rule.device == "gpu":
        return normalize_gpu(key)
    if rule.device == "pci" and topo is not None:
        return topo.gpu_of(key)
    return None


DEVICE_WORD = {"gpu": "GPU", "ib_port": "InfiniBand port", "pci": "PCI device"}


def _event(ruleset: RuleSet, ctx: ExecutionContext, node: str, rule: CounterRule, key: str, gpu: str | None,
           changes: list[CounterChange], absolute_phase: str | None) -> Event:
    spec = ruleset.kinds[rule.kind]
    what = f"{DEVICE_WORD[rule.device]} {key}"
    if rule.device == "pci" and gpu is not None and normalize_gpu(key) != gpu:
        what += f" (upstream of GPU {gpu})"
    fields: dict[str, str] = {"evidence": "system", "device": key}
    if absolute_phase is None:
        shown = ", ".join(f"{c.counter} {_num(c.before)} -> {_num(c.after)}" for c in changes)
        text = f"{what}: {shown} between the prolog's and the epilog's snapshot"
        role = rule.role or spec.role
        time = ctx.start
        fields["window"] = "job"
        where = "prolog..epilog"
        for c in changes:
            fields[c.counter] = f"{_num(c.before)} -> {_num(c.after)}"
    else:
        other = "prolog" if absolute_phase == "epilog" else "epilog"
        shown = ", ".join(f"{c.counter} {_num(c.after)}" for c in changes)
        text = f"{what}: {shown} at the {absolute_phase} (no {other} snapshot: not known to be this job's)"
        role = "context"
        time = ctx.end if absolute_phase == "epilog" else ctx.start
        fields["window"] = f"{absolute_phase} only"
        where = absolute_phase
        for c in changes:
            fields[c.counter] = _num(c.after)
    return Event(kind=rule.kind, role=role, rule=rule.id, source=TELEMETRY_SOURCE,
                 location=f"nodes/{node}/telemetry/{where}:{key}", line=text, message=text, node=node, gpu=gpu,
                 time=time, outcome=spec.outcome, action=rule.action or spec.action,
                 severity=rule.severity or spec.severity, fields=fields)


def _gone_event(ruleset: RuleSet, ctx: ExecutionContext, node: str, rule: CounterRule, key: str, gpu: str | None,
                how: str, prolog: Snapshot | None, absolute_phase: str | None) -> Event:
    spec = ruleset.kinds[rule.kind]
    what = f"{DEVICE_WORD[rule.device]} {key}"
    tool = SOURCE_OF[rule.device]
    said = "named it as unreachable" if how == "unreachable" else "no longer lists it"
    fields: dict[str, str] = {"evidence": "system", "device": key, "vanished": how}
    if how.startswith("said:"):
        said, fields["vanished"], fields["said"] = f"said \"{how[5:]}\"", "said", how[5:]
    last = prolog.devices(rule.device).get(key, {}) if prolog is not None else {}
    for c in rule.counters:
        if c in last:
            fields[c] = f"{_num(last[c])} -> gone"
    if absolute_phase is None:
        text = f"{what}: listed in the prolog's snapshot; the epilog's {tool} {said}"
        role, time, where = rule.role or spec.role, ctx.start, "prolog..epilog"
        fields["window"] = "job"
    else:
        text = f"{what}: the epilog's {tool} {said} (no prolog snapshot: not known to be this job's)"
        role, time, where = "context", ctx.end, "epilog"
        fields["window"] = "epilog only"
    return Event(kind=rule.kind, role=role, rule=rule.id, source=TELEMETRY_SOURCE,
                 location=f"nodes/{node}/telemetry/{where}:{key}", line=text, message=text, node=node, gpu=gpu,
                 time=time, outcome=spec.outcome, action=rule.action or spec.action,
                 severity=rule.severity or spec.severity, fields=fields)


# -- the rules' own examples ---------------------------------------------------------------------------------

EXAMPLE_GPU = "00000000:3B:00.0"
EXAMPLE_DEVICE = {"gpu": "0000:3b:00", "ib_port": "mlx5_0/1", "pci": "0000:3a:00.0"}
EXAMPLE_GPU_FUNCTION = "0000:3b:00.0"
#: the example node's PCI tree: the GPU 0000:3b:00.0 under bridge 0000:3a:00.0 under root port 0000:00:01.0
EXAMPLE_PARENTS = {"0000:3b:00.0": ("0000:3a:00.0", "0000:00:01.0"), "0000:3a:00.0": ("0000:00:01.0",),
                   "0000:5e:00.0": ("0000:5d:00.0",)}


def example_snapshot(rule: CounterRule, phase: str, device: str, values: Mapping[str, float] | str | None):
    """One side of an example: counter values of the device; None (no snapshot on that side); "absent" (the
    side's tool listed other devices, not this one); "unreachable" (the GPU tool failed naming this GPU);
    {said: [lines], values: {...}} (the GPU tool printed these lines; with values, its document listed the GPU
    with them; without, it listed no GPU)."""
    if values is None:
        return None
    gpus = {normalize_gpu(EXAMPLE_GPU): {}} if rule.device != "gpu" else {}
    present = ("nvidia-smi", SOURCE_OF[rule.device]) if rule.device != "gpu" else ("nvidia-smi",)
    kw: dict[str, Any] = {"gpus": gpus}
    lost: tuple[str, ...] = ()
    if isinstance(values, Mapping) and "said" in values:
        kw["messages"] = tuple(values["said"])
        listed = values.get("values")
        if listed is None:
            present = tuple(p for p in present if p != "nvidia-smi")
        values = "absent" if listed is None else listed
    if values == "absent":
        dev: dict = {}
    elif values == "unreachable":
        dev, lost = {}, (normalize_gpu(device) or device,)
        present = tuple(p for p in present if p != "nvidia-smi")
    else:
        dev = {device: {k: float(v) for k, v in dict(values).items()}}
    kw[{"gpu": "gpus", "ib_port": "ports", "pci": "pci"}[rule.device]] = dev
    return Snapshot(phase, parents=EXAMPLE_PARENTS, present=present, lost=lost, **kw)


def check_examples(ruleset: RuleSet, ctx: ExecutionContext) -> list[str]:
    """Every counter rule's examples, run through `evaluate`: `path: message` per problem."""
    problems: list[str] = []
    for rule in counter_rules(ruleset):
        for n, ex in enumerate(rule.examples):
            device = ex.get("device") or EXAMPLE_DEVICE[rule.device]
            if rule.device == "pci" and rule.trigger == "vanished" and not ex.get("device"):
                device = EXAMPLE_GPU_FUNCTION  # what vanishes with a GPU is the GPU's own PCI function
            pro = example_snapshot(rule, "prolog", device, ex["prolog"])
            epi = example_snapshot(rule, "epilog", device, ex["epilog"])
            got = evaluate(ruleset, ctx, ctx.nodes[0], pro, epi, [rule])
            want = list(ex["expect"])
            where = f"{rule.path}: counter rule {rule.id}: example {n + 1}" + (f" ({ex['note']})" if ex.get("note")
                                                                              else "")
            if len(got) != len(want):
                problems.append(f"{where}: gives {len(got)} event(s) {[(e.kind, e.role) for e in got]}, "
                                f"expected {len(want)}")
                continue
            for ev, exp in zip(got, want):
                for k, v in exp.items():
                    have = ev.gpu if k == "gpu" else getattr(ev, k)
                    v = normalize_gpu(v) if k == "gpu" and v is not None else v
                    if have != v:
                        problems.append(f"{where}: {k} is {have!r}, expected {v!r}")
    return problems


__all__ = ["CounterRule", "CounterChange", "counter_rules", "watched", "evaluate", "check_examples", "DEVICES",
           "TELEMETRY_SOURCE"]
