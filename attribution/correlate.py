"""correlate: separate the trigger from its consequences across all nodes of a job. Pure.

Implements spec/verdict.md "How the root cause is chosen" over the causal graph of the rule pack:
window the events, let causes explain what the graph says they explain, demote explained causes to symptoms,
take the earliest remaining cause as the root, and fall back to symptom hints and then the job state.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta
from typing import Iterable, Sequence

from .model import INFRASTRUCTURE_OUTCOMES, Coverage, Event, ExecutionContext, Symptom, Verdict
from .rulepack import CausalGraph, Edge, RuleSet

#: Log stamps often have one-second resolution: an event in the same second as its explainer is "after" it.
SAME_NODE_TOLERANCE = 1.0


class _Placed:
    """An event with the time used for ordering (untimed events sit at the job end)."""

    __slots__ = ("ev", "t", "idx")

    def __init__(self, ev: Event, t: float, idx: int) -> None:
        self.ev = ev
        self.t = t
        self.idx = idx


def job_window(ctx: ExecutionContext, graph: CausalGraph) -> tuple[datetime | None, datetime | None]:
    lo = ctx.start - timedelta(seconds=graph.before_start_seconds) if ctx.start else None
    hi = ctx.end + timedelta(seconds=graph.after_end_seconds) if ctx.end else None
    return lo, hi


def in_window(ev: Event, lo: datetime | None, hi: datetime | None) -> bool:
    if ev.time is None:
        return True
    if lo is not None and ev.time < lo:
        return False
    if hi is not None and ev.time > hi:
        return False
    return True


def _sig(e: Event) -> tuple:
    return (e.kind, e.outcome, e.role, e.source)


def _edges_for(graph: CausalGraph, a: Event, b: Event, cache: dict) -> list[Edge]:
    key = (_sig(a), _sig(b))
    edges = cache.get(key)
    if edges is None:
        edges = [edge for edge in graph.edges
                 if edge.causes.matches(*key[0]) and edge.explains.matches(*key[1])]
        cache[key] = edges
    return edges


def _explains(edge: Edge, a: _Placed, b: _Placed, skew: float) -> bool:
    ea, eb = a.ev, b.ev
    if edge.locality == "gpu":
        if ea.node is None or ea.node != eb.node or ea.gpu is None or ea.gpu != eb.gpu:
            return False
    elif edge.locality == "node":
        if ea.node is None or ea.node != eb.node:
            return False
    same_node = ea.node is not None and ea.node == eb.node
    tol = SAME_NODE_TOLERANCE if same_node else max(SAME_NODE_TOLERANCE, skew)
    delta = b.t - a.t
    if delta < -tol:
        return False
    if edge.within_seconds is not None and delta > edge.within_seconds + tol:
        return False
    for explained_field, explainer_field in edge.link_fields:
        want = eb.fields.get(explained_field)
        if want is None:
            continue
        have = ea.fields.get(explainer_field)
        if have is None and explainer_field == "code":
            have = None if ea.code is None else str(ea.code)
        if have is None or str(have) != str(want):
            return False
    return True


def _explainer(graph: CausalGraph, a: _Placed, b: _Placed, cache: dict) -> bool:
    if a is b:
        return False
    ea, eb = a.ev, b.ev
    if ea.kind == eb.kind and ea.node != eb.node:
        return False  # two causes of the same kind on different nodes never explain each other
    edges = _edges_for(graph, ea, eb, cache)
    if not edges:
        return False
    skew = float(graph.clock_skew_seconds)
    return any(_explains(edge, a, b, skew) for edge in edges)


def _ref(ev: Event) -> str:
    where = ev.node or "job"
    return f"{ev.kind}@{where}:{ev.location}"


def correlate(ruleset: RuleSet, ctx: ExecutionContext, events: Iterable[Event],
              coverage: Sequence[Coverage] = (), max_symptoms: int | None = None) -> Verdict:
    graph = ruleset.graph
    lo, hi = job_window(ctx, graph)
    end_t = ctx.end.timestamp() if ctx.end else math.inf
    evs = sorted((e for e in events if e.role != "context" and in_window(e, lo, hi)), key=Event.sort_key)
    placed = [_Placed(e, e.time.timestamp() if e.time else end_t, i) for i, e in enumerate(evs)]
    causes = [p for p in placed if p.ev.role == "cause"]

    explainers: dict[int, list[_Placed]] = {}
    explains_count: Counter[int] = Counter()
    cache: dict = {}
    for b in placed:
        for a in causes:
            if _explainer(graph, a, b, cache):
                explainers.setdefault(b.idx, []).append(a)
                explains_count[a.idx] += 1

    def demoted(c: _Placed) -> bool:
        for a in explainers.get(c.idx, ()):
            mutual = any(x is c for x in explainers.get(a.idx, ()))
            if not mutual:
                return True
        return False

    remaining = [c for c in causes if not demoted(c)]
    remaining.sort(key=lambda c: (math.floor(c.t) if c.t != math.inf else math.inf, -explains_count[c.idx],
                                  c.ev.node or "\uffff", c.ev.sort_key()))
    decision = ruleset.job_states.decide(ctx.state)

    root: _Placed | None = None
    culprits: list[tuple[str, str | None]] = []
    if decision.final:
        outcome, action, confidence = decision.outcome, decision.action, decision.confidence
    elif remaining:
        root = remaining[0]
        r = root.ev
        outcome = r.outcome or "unknown"
        action = r.action or "investigate"
        others = {c.ev.outcome for c in remaining[1:]}
        confidence = "high" if others <= {outcome} else "medium"
        if outcome in INFRASTRUCTURE_OUTCOMES:
            culprits = _culprits(root, remaining)
    else:
        outcome, action, confidence, culprits = _hint_or_state(ruleset, ctx, placed, decision)

    root_idx = root.idx if root else None
    symptoms: list[Symptom] = []
    for p in placed:
        if p is root or (p.ev.role == "cause" and p in remaining):
            continue
        exps = explainers.get(p.idx, [])
        ref = None
        if root_idx is not None and any(a.idx == root_idx for a in exps):
            ref = "root_cause"
        elif exps:
            best = min(exps, key=lambda a: (a in remaining and 0 or 1, a.t, a.idx))
            ref = _ref(best.ev)
        symptoms.append(Symptom(p.ev, ref))
    if max_symptoms is not None and len(symptoms) > max_symptoms:
        symptoms = symptoms[:max_symptoms]

    verdict_causes = tuple(c.ev for c in remaining)
    explanation = explain(ruleset, ctx, outcome, root.ev if root else None, culprits, placed, decision.final)
    return Verdict(
        context=ctx,
        outcome=outcome,
        confidence=confidence,
        action=action,
        root_cause=root.ev if root else None,
        culprits=tuple(culprits),
        symptoms=tuple(symptoms),
        explanation=explanation,
        coverage=tuple(sorted(coverage, key=lambda c: (c.source, c.node or "", c.file or "", c.status))),
        rules_version=ruleset.version,
        causes=verdict_causes,
    )


def _culprits(root: _Placed, remaining: list[_Placed]) -> list[tuple[str, str | None]]:
    out: dict[str, str | None] = {}
    for c in [root] + remaining:
        e = c.ev
        if e.outcome not in INFRASTRUCTURE_OUTCOMES or e.node is None:
            continue
        if e.node not in out or (out[e.node] is None and e.gpu):
            out[e.node] = e.gpu if e.node not in out else (out[e.node] or e.gpu)
    order = [root.ev.node] + sorted(n for n in out if n != root.ev.node)
    return [(n, out[n]) for n in order if n in out]


def _hint_or_state(ruleset: RuleSet, ctx: ExecutionContext, placed: list[_Placed], decision):
    best = None
    for p in placed:
        spec = ruleset.kinds.get(p.ev.kind)
        if spec is None or not spec.hint or p.ev.role != "symptom":
            continue
        pr = spec.hint["priority"]
        if best is None or pr < best[0]:
            best = (pr, spec)
    if best is not None:
        spec = best[1]
        h = spec.hint
        culprits: list[tuple[str, str | None]] = []
        if h["culprit"] == "node":
            seen: dict[str, str | None] = {}
            for p in placed:
                if p.ev.kind == spec.name and p.ev.node and p.ev.node not in seen:
                    seen[p.ev.node] = p.ev.gpu
            culprits = sorted(seen.items())
        return h["outcome"], h["action"], h["confidence"], culprits
    culprits = []
    if decision.culprit == "failed_node" and ctx.failed_node:
        culprits = [(ctx.failed_node, None)]
    return decision.outcome, decision.action, decision.confidence, culprits


def _fmt_time(t: datetime | None) -> str:
    return t.strftime("%H:%M:%S") if t else "an unknown time"


def explain(ruleset: RuleSet, ctx: ExecutionContext, outcome: str, root: Event | None,
            culprits: list[tuple[str, str | None]], placed: list[_Placed], final: bool) -> str:
    """One sentence for a human: what broke first, where, and what followed."""
    symptoms = [p.ev for p in placed if p.ev is not root and (p.ev.role == "symptom" or p.ev.role == "cause")]
    if final:
        return f"The job ended {ctx.state}; nothing to attribute."
    if root is not None:
        spec = ruleset.kinds[root.kind]
        what = spec.summary
        if root.code is not None and root.source in ("kernel", "fabricmanager") and "xid" in root.rule.lower():
            what = f"{what} (Xid {root.code})"
        dev = f"GPU {root.gpu} on {root.node}" if root.gpu and root.node else (root.node or "the job")
        head = f"{dev} {what} at {_fmt_time(root.time)}"
        if not symptoms:
            return head + "."
        by_kind = Counter(e.kind for e in symptoms)
        nodes = {e.node for e in symptoms if e.node}
        top = ", ".join(f"{n} {k}" for k, n in by_kind.most_common(3))
        return f"{head}; {len(symptoms)} consequences on {len(nodes)} node(s) followed ({top})."
    if culprits:
        names = ", ".join(n for n, _ in culprits)
        return f"No cause event was found; the evidence points at {outcome} on {names}."
    if symptoms:
        by_kind = Counter(e.kind for e in symptoms)
        top = ", ".join(f"{n} {k}" for k, n in by_kind.most_common(3))
        return f"Only symptoms were found ({top}); outcome {outcome} from the evidence and job state {ctx.state}."
    return f"No fault event in the job window; job state {ctx.state} gives {outcome}."
