"""extract: observations to normalized events, by the rules of a loaded RuleSet. Pure.

Every rule that matches a record emits an event (no first-match-wins); a rule may step aside when another
kind was found on the same record (`unless_kinds`) or when the collector flagged the record (`unless_flags`).
Catalog rules take kind, action and severity from the catalog entry of the captured code. The node of a
job-output line is resolved as docs/bundle.md says: a host name in the line, then a rank, then the srun label,
then the file name, then the only node of a one-node job. Secrets are redacted from each observation before any
rule sees it (extract.redact, rules/redactions.yaml).
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping

from attribution import frozen
from attribution.extract.redact import redact_observation
from attribution.model import Event, ExecutionContext, Observation, normalize_gpu
from attribution.rulepack.values import SPECIAL_GROUPS, Rule, RuleSet
from attribution.timeparse import TimeError, parse_iso, resolve_zone


INT4_MAX = 2**31 - 1


def _int(v: str | None) -> int | None:
    """A captured number, or None when it is not one or is beyond any real code or rank (the store's int4)."""
    if v is None or len(v) > 12:
        return None
    try:
        n = int(v)
    except ValueError:
        return None
    return n if -INT4_MAX <= n <= INT4_MAX else None


def resolve_node(ctx: ExecutionContext, obs: Observation, groups: Mapping[str, str]) -> str | None:
    """Which node an event belongs to (docs/bundle.md 'Which node a job-output line belongs to')."""
    if obs.source not in ("job", "scheduler"):
        return obs.node
    for host in (groups.get("host"), groups.get("node"), obs.host):
        n = ctx.resolve_host(host)
        if n:
            return n
    for rank in (_int(groups.get("rank")), obs.rank):
        n = ctx.node_of_rank(rank)
        if n:
            return n
    for task in (_int(groups.get("task")), obs.label):
        n = ctx.node_of_task(task)
        if n:
            return n
    if obs.node is None and len(ctx.nodes) == 1:
        return ctx.nodes[0]  # rule 5: a one-node job's output can only come from that node
    return obs.node


def _event_time(obs: Observation, groups: Mapping[str, str], zone) -> datetime | None:
    if obs.time is not None:
        return obs.time
    ts = groups.get("ts")
    if ts:
        try:
            return parse_iso(ts, zone)
        except TimeError:
            return None
    return None


def _normalize_message(text: str) -> str:
    return " ".join(text.split())


def extract_one(ruleset: RuleSet, ctx: ExecutionContext, obs: Observation, zone=None) -> list[Event]:
    """Every event the rules find in one observation, its secrets redacted first (extract.redact): the rules
    match, and the events carry, the redacted text and line."""
    if zone is None:
        zone = resolve_zone(ctx.timezone)
    obs = redact_observation(ruleset, obs)
    produced: list[tuple[Rule, Event]] = []
    for rule in ruleset.matching(obs.source, obs.text):
        if rule.require_flags and not rule.require_flags <= obs.flags:
            continue
        if rule.unless_flags & obs.flags:
            continue
        m = rule.regex.search(obs.text)
        if m is None:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        ev = _event(ruleset, ctx, obs, rule, groups, zone)
        if ev is not None:
            produced.append((rule, ev))
    if not produced:
        return []
    kinds_here = {ev.kind for _, ev in produced}
    return [ev for rule, ev in produced if not (rule.unless_kinds & (kinds_here - {ev.kind}))]


def _event(ruleset: RuleSet, ctx: ExecutionContext, obs: Observation, rule: Rule,
           groups: dict[str, str], zone) -> Event | None:
    code = _int(groups.get("code"))
    if code is None:
        code = rule.code
    kind, action, severity = rule.kind, rule.action, rule.severity
    fields = {k: v for k, v in groups.items() if k not in SPECIAL_GROUPS}
    fields.update(rule.set_fields)
    if rule.catalog:
        entry = ruleset.catalogs[rule.catalog].lookup(code)
        if entry is None:
            return None
        kind = entry.kind
        action = entry.action or action
        severity = entry.severity or severity
        if entry.mnemonic:
            fields["mnemonic"] = entry.mnemonic
        for fname, rx in entry.fields:
            fm = rx.search(obs.text)
            if fm:
                fields[fname] = fm.group(1) if fm.groups() else fm.group(0)
        probe = dict(groups)
        probe.update(fields)
        probe.setdefault("text", obs.text)
        for v in entry.variants:
            if v.applies(probe):
                kind = v.kind
                action = v.action or action
                severity = v.severity or severity
                break
    assert kind is not None
    spec = ruleset.kinds[kind]
    rank = _int(groups.get("rank"))
    return Event(
        kind=kind,
        role=rule.role or spec.role,
        rule=rule.id,
        source=obs.source,
        location=obs.location,
        line=obs.line,
        message=_normalize_message(obs.text),
        node=resolve_node(ctx, obs, groups),
        gpu=normalize_gpu(groups.get("gpu")),
        code=code,
        rank=rank if rank is not None else obs.rank,
        time=_event_time(obs, groups, zone),
        outcome=spec.outcome,
        action=action or spec.action,
        severity=severity or spec.severity,
        fields=fields,
    )


def believable_window(ruleset: RuleSet, ctx: ExecutionContext) -> tuple[datetime | None, datetime | None]:
    """The times a user-written line may claim: the job window widened by the causal graph's margins."""
    before, after = ruleset.graph.margins()
    lo = ctx.start - before if ctx.start else None
    hi = ctx.end + after if ctx.end else None
    return lo, hi


def untrusted_time_dropped(ev: Event, lo: datetime | None, hi: datetime | None) -> Event:
    """A job-output event whose time lies outside the believable window is not placed in time (docs/verdict.md
    "Evidence a user could have written"): its program could have printed any date."""
    if ev.time is None or ev.evidence == "system":
        return ev
    if (lo is not None and ev.time < lo) or (hi is not None and ev.time > hi):
        return frozen.replace(ev, time=None)
    return ev


def extract(ruleset: RuleSet, ctx: ExecutionContext, observations: Iterable[Observation]) -> list[Event]:
    """All events of all observations, in a total order that does not depend on the input order."""
    zone = resolve_zone(ctx.timezone)
    lo, hi = believable_window(ruleset, ctx)
    out: list[Event] = []
    for obs in observations:
        out.extend(untrusted_time_dropped(e, lo, hi) for e in extract_one(ruleset, ctx, obs, zone))
    out.sort(key=Event.sort_key)
    return out
