"""correlate: separate the trigger from its consequences across all nodes of a job. Pure.

Implements docs/verdict.md "How the root cause is chosen" over the causal graph of the rule pack:
window the events, let causes explain what the graph says they explain, demote explained causes to symptoms,
take the earliest remaining cause as the root, and fall back to symptom hints and then the job state.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Iterable, Sequence

from attribution.correlate.cost import failure_cost
from attribution.correlate.explains import Placed, Relation
from attribution.model import INFRASTRUCTURE_OUTCOMES, Coverage, Event, ExecutionContext, Symptom, Verdict
from attribution.rulepack.values import CausalGraph, RuleSet


def job_window(ctx: ExecutionContext, graph: CausalGraph) -> tuple[datetime | None, datetime | None]:
    before, after = graph.margins()
    lo = ctx.start - before if ctx.start else None
    hi = ctx.end + after if ctx.end else None
    return lo, hi


def in_window(ev: Event, lo: datetime | None, hi: datetime | None) -> bool:
    if ev.time is None:
        return True
    if lo is not None and ev.time < lo:
        return False
    if hi is not None and ev.time > hi:
        return False
    return True


def _ref(ev: Event) -> str:
    where = ev.node or "job"
    return f"{ev.kind}@{where}:{ev.location}"


def correlate(ruleset: RuleSet, ctx: ExecutionContext, events: Iterable[Event],
              coverage: Sequence[Coverage] = (), max_symptoms: int | None = None, digest=None) -> Verdict:
    """The verdict of a job's events. With `digest` (correlate.digest.SymptomDigest, `events` ignored) the events
    are the digest's: the same verdict, its symptom list the digest's first `listed`, totals and groups exact."""
    graph = ruleset.graph
    events = list(events)
    lo, hi = job_window(ctx, graph)
    end_t = ctx.end.timestamp() if ctx.end else math.inf
    if digest is not None:
        events = digest.kept
    evs = sorted((e for e in events if e.role != "context" and in_window(e, lo, hi)), key=Event.sort_key)
    placed = [Placed(e, e.time.timestamp() if e.time else end_t, i) for i, e in enumerate(evs)]
    causes = [p for p in placed if p.ev.role == "cause"]
    folded = [Placed(f, t, -1, n) for f, t, n in digest.folded()] if digest is not None else []
    rel = Relation(graph, causes, placed + folded)

    def demoted(c: Placed) -> bool:  # explained by a cause it does not explain in turn
        return any(not rel.explains(c, a) for a in rel.explainers(c))

    remaining = [c for c in causes if not demoted(c)]
    remaining.sort(key=lambda c: (math.floor(c.t) if c.t != math.inf else math.inf, -rel.count(c),
                                  c.ev.node or "\uffff", c.ev.sort_key()))
    remaining_idx = {c.idx for c in remaining}
    decision = ruleset.job_states.decide(ctx.state)

    root: Placed | None = None
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
        outcome, action, confidence, culprits = _hint_or_state(ruleset, ctx, placed, decision, digest)

    unexplained = [p for p in placed if p is not root and p.idx not in remaining_idx]
    symptoms_total = None
    groups = None
    if digest is not None:
        # the whole events' symptom list, as far as it is listed: the kept ones merged with the digest's first
        listed = unexplained + [Placed(e, e.time.timestamp() if e.time else end_t, -1) for e in digest.top()]
        listed.sort(key=lambda p: p.ev.sort_key())
        limit = digest.listed if max_symptoms is None else min(max_symptoms, digest.listed)
        unexplained = listed[:limit]
        symptoms_total = len(listed) - len(digest.top()) + digest.total
        groups = _groups(placed, root, remaining_idx, digest)
    symptoms = [Symptom(p.ev, _symptom_ref(rel, p, root, remaining_idx)) for p in unexplained]
    if max_symptoms is not None and len(symptoms) > max_symptoms:
        symptoms = symptoms[:max_symptoms]

    verdict_causes = tuple(c.ev for c in remaining)
    culprit_evidence = tuple(_culprit_evidence(node, root, remaining, placed, ctx, digest) for node, _ in culprits)
    if "job_output" in culprit_evidence and confidence == "high":  # what a user could have printed
        confidence = "medium"
    explanation = explain(ruleset, ctx, outcome, root.ev if root else None, culprits, placed, decision.final,
                          digest)
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
        culprit_evidence=culprit_evidence,
        cost=failure_cost(ctx, events, outcome),
        symptoms_total=symptoms_total,
        symptom_groups=groups,
    )


def _culprit_evidence(node: str, root: Placed | None, remaining: list[Placed], placed: list[Placed],
                      ctx: ExecutionContext, digest=None) -> str:
    """`system` when system-written evidence names the culprit: an infrastructure cause on it (when a root was
    found), else any event on it of an infrastructure outcome, or the scheduler's own failed node; otherwise
    the culprit rests only on job output (docs/verdict.md "Evidence a user could have written")."""
    if root is not None:
        support = [c.ev for c in [root] + remaining if c.ev.node == node and c.ev.outcome in INFRASTRUCTURE_OUTCOMES]
    else:
        support = [p.ev for p in placed if p.ev.node == node]
        if ctx.failed_node == node or (digest is not None and node in digest.system_nodes):
            return "system"
    return "system" if any(e.evidence == "system" for e in support) else "job_output"


def _groups(placed: list[Placed], root: Placed | None, remaining_idx: set[int], digest) -> tuple:
    """The symptom groups (kind, node, count, first time, last time) of the kept symptoms and the folded ones."""
    from attribution.correlate.digest import GroupTally

    tally = {k: GroupTally() for k in digest.groups}
    for k, g in digest.groups.items():
        tally[k].merge(g)
    for p in placed:
        if p is root or p.idx in remaining_idx:
            continue
        tally.setdefault((p.ev.kind, p.ev.node), GroupTally()).add(p.ev, p.ev.sort_key())
    return tuple((kind, node, g.count, g.tmin, g.tmax) for (kind, node), g in tally.items())


def _symptom_ref(rel: Relation, p: Placed, root: Placed | None, remaining_idx: set[int]) -> str | None:
    """What explains a symptom: the root cause if it does, else the earliest remaining cause that does, else
    the earliest (demoted) cause that does; None when nothing does."""
    if root is not None and rel.explains(root, p):
        return "root_cause"
    first = None
    for a in rel.explainers(p):
        if a.idx in remaining_idx:
            return _ref(a.ev)
        first = first or a
    return _ref(first.ev) if first is not None else None


def _culprits(root: Placed, remaining: list[Placed]) -> list[tuple[str, str | None]]:
    out: dict[str, str | None] = {}
    for c in [root] + remaining:
        e = c.ev
        if e.outcome not in INFRASTRUCTURE_OUTCOMES or e.node is None:
            continue
        if e.node not in out or (out[e.node] is None and e.gpu):
            out[e.node] = e.gpu if e.node not in out else (out[e.node] or e.gpu)
    order = [root.ev.node] + sorted(n for n in out if n != root.ev.node)
    return [(n, out[n]) for n in order if n in out]


def _hint_or_state(ruleset: RuleSet, ctx: ExecutionContext, placed: list[Placed], decision, digest=None):
    best = None
    for kind, first in _first_of_kinds(placed, digest, symptoms_only=True):
        spec = ruleset.kinds.get(kind)
        if spec is None or not spec.hint:
            continue
        pr = spec.hint["priority"]
        if best is None or pr < best[0]:
            best = (pr, spec)
    if best is not None:
        spec = best[1]
        h = spec.hint
        culprits: list[tuple[str, str | None]] = []
        if h["culprit"] == "node":
            seen: dict[str, tuple] = {}  # node -> (order key of its first event of the kind, its GPU)
            for p in placed:
                if p.ev.kind == spec.name and p.ev.node and p.ev.node not in seen:
                    seen[p.ev.node] = (p.ev.sort_key(), p.ev.gpu)
            if digest is not None:
                for (kind, node), g in digest.groups.items():
                    if kind == spec.name and node and (node not in seen or g.first_key < seen[node][0]):
                        seen[node] = (g.first_key, g.first_gpu)
            culprits = sorted((n, gpu) for n, (_, gpu) in seen.items())
        return h["outcome"], h["action"], h["confidence"], culprits
    culprits = []
    if decision.culprit == "failed_node" and ctx.failed_node:
        culprits = [(ctx.failed_node, None)]
    return decision.outcome, decision.action, decision.confidence, culprits


def _first_of_kinds(placed: list[Placed], digest, symptoms_only: bool, skip: Event | None = None):
    """(kind, order key of its first event) in order of first appearance, over the kept events (symptoms only,
    or symptoms and causes but `skip`) and the digest's folded symptoms."""
    first: dict[str, tuple] = {}
    for p in placed:
        e = p.ev
        if e is skip or not (e.role == "symptom" or (not symptoms_only and e.role == "cause")):
            continue
        if e.kind not in first:
            first[e.kind] = e.sort_key()
    if digest is not None:
        for (kind, _), g in digest.groups.items():
            if kind not in first or g.first_key < first[kind]:
                first[kind] = g.first_key
    return sorted(first.items(), key=lambda kv: kv[1])


def _fmt_time(t: datetime | None) -> str:
    return t.strftime("%H:%M:%S") if t else "an unknown time"


def explain(ruleset: RuleSet, ctx: ExecutionContext, outcome: str, root: Event | None,
            culprits: list[tuple[str, str | None]], placed: list[Placed], final: bool, digest=None) -> str:
    """One sentence for a human: what broke first, where, and what followed."""
    symptoms = [p.ev for p in placed if p.ev is not root and (p.ev.role == "symptom" or p.ev.role == "cause")]
    by_kind = Counter(e.kind for e in symptoms)
    nodes = {e.node for e in symptoms if e.node}
    count = len(symptoms)
    if digest is not None:
        for (kind, node), g in digest.groups.items():
            by_kind[kind] += g.count
            if node:
                nodes.add(node)
        count += digest.total
        # most_common orders ties by first appearance: in the whole events' order, not the kept ones'
        order = {k: i for i, (k, _) in enumerate(_first_of_kinds(placed, digest, False, skip=root))}
        by_kind = Counter(dict(sorted(by_kind.items(), key=lambda kv: order[kv[0]])))
    if final:
        return f"The job ended {ctx.state}; nothing to attribute."
    if root is not None:
        spec = ruleset.kinds.get(root.kind)  # stored by another rule-pack version, or reported from outside
        what = spec.summary if spec else f"reported {root.kind!r}"
        if root.code is not None and root.source in ("kernel", "fabricmanager") and "xid" in root.rule.lower():
            what = f"{what} (Xid {root.code})"
        dev = f"GPU {root.gpu} on {root.node}" if root.gpu and root.node else (root.node or "the job")
        if root.source == "telemetry" and root.fields.get("window") == "job":
            # a counter that grew between the two snapshots: when exactly is not known
            head = f"{dev} {what}, between the counter snapshots at {_fmt_time(ctx.start)} and {_fmt_time(ctx.end)}"
        else:
            head = f"{dev} {what} at {_fmt_time(root.time)}"
        if not count:
            return head + "."
        top = ", ".join(f"{n} {k}" for k, n in by_kind.most_common(3))
        return f"{head}; {count} consequences on {len(nodes)} node(s) followed ({top})."
    if culprits:
        names = ", ".join(n for n, _ in culprits)
        return f"No cause event was found; the evidence points at {outcome} on {names}."
    if count:
        top = ", ".join(f"{n} {k}" for k, n in by_kind.most_common(3))
        return f"Only symptoms were found ({top}); outcome {outcome} from the evidence and job state {ctx.state}."
    return f"No fault event in the job window; job state {ctx.state} gives {outcome}."
