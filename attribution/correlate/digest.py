"""A job's symptoms folded in as they stream, so that memory stays bounded however noisy the logs are. Pure.

A job whose ranks print a million NCCL warnings has a million symptom events; correlation reads almost nothing of
each (docs/verdict.md): whether a cause explains it (its signature, node, GPU, time and the link fields of the
causal graph), which hint it gives, and the verdict counts and lists them. `SymptomDigest.add` takes every event
of a job; it keeps whole every event that is not a symptom inside the job window (causes, context: few) and the
first `listed` symptoms in verdict order, and folds every symptom into exact counts:

- per (signature, node, GPU, time, link field values): what `Relation.count` weighs (a cause's rank among
  simultaneous causes), as one weighted item;
- per (kind, node): count, first and last time, the first one's GPU and order key: the verdict's symptom groups,
  the explanation's counts, the hint culprits; and the nodes with a symptom of system-written evidence (what a
  hint culprit's evidence rests on).

`correlate(..., digest=d)` then gives the verdict the whole list would give, with the symptom list cut at
`listed` and the totals and groups of all of them (tests/correlate/test_digest.py runs both on every bundle).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from attribution.model import Event, ExecutionContext
from attribution.rulepack.values import CausalGraph

__all__ = ["SymptomDigest", "Folded", "GroupTally"]


class Folded:
    """What correlation reads of folded symptoms that agree on it (an Event's attributes, by the same names)."""

    __slots__ = ("kind", "outcome", "role", "source", "node", "gpu", "fields")

    def __init__(self, kind, outcome, role, source, node, gpu, fields) -> None:
        self.kind = kind
        self.outcome = outcome
        self.role = role
        self.source = source
        self.node = node
        self.gpu = gpu
        self.fields = fields


@dataclass
class GroupTally:
    """The symptoms of one kind on one node: how many, when, and the first one's GPU and order key."""

    count: int = 0
    first_key: tuple | None = None
    first_gpu: str | None = None
    tmin: object = None  # datetime
    tmax: object = None

    def add(self, ev: Event, key: tuple) -> None:
        self.count += 1
        if self.first_key is None or key < self.first_key:
            self.first_key = key
            self.first_gpu = ev.gpu
        t = ev.time
        if t is not None:
            if self.tmin is None or t < self.tmin:
                self.tmin = t
            if self.tmax is None or t > self.tmax:
                self.tmax = t

    def merge(self, other: GroupTally) -> None:
        self.count += other.count
        if other.first_key is not None and (self.first_key is None or other.first_key < self.first_key):
            self.first_key, self.first_gpu = other.first_key, other.first_gpu
        for t in (other.tmin, other.tmax):
            if t is not None:
                self.tmin = t if self.tmin is None or t < self.tmin else self.tmin
                self.tmax = t if self.tmax is None or t > self.tmax else self.tmax


@dataclass
class SymptomDigest:
    """Every event of one job, symptoms folded (see the module doc). `listed`: how many symptoms stay whole."""

    graph: CausalGraph
    ctx: ExecutionContext
    listed: int
    kept: list[Event] = field(default_factory=list)
    total: int = 0
    weights: dict[tuple, int] = field(default_factory=dict)
    groups: dict[tuple, GroupTally] = field(default_factory=dict)
    system_nodes: set = field(default_factory=set)  # nodes with a folded symptom of system-written evidence
    _top: list = field(default_factory=list)  # max-heap (negated order) of the first `listed` symptoms
    _seq: int = 0

    def __post_init__(self) -> None:
        from attribution.correlate.rootcause import job_window

        self._lo, self._hi = job_window(self.ctx, self.graph)
        self._end_t = self.ctx.end.timestamp() if self.ctx.end else math.inf
        self._link = tuple(sorted({f for e in self.graph.edges for f, _ in e.link_fields}))

    def add(self, ev: Event) -> None:
        from attribution.correlate.rootcause import in_window

        if ev.role != "symptom" or not in_window(ev, self._lo, self._hi):
            self.kept.append(ev)
            return
        self.total += 1
        key = ev.sort_key()
        links = tuple((f, ev.fields[f]) for f in self._link if f in ev.fields)
        t = ev.time.timestamp() if ev.time else self._end_t
        w = (ev.kind, ev.outcome, ev.role, ev.source, ev.node, ev.gpu, t, links)
        self.weights[w] = self.weights.get(w, 0) + 1
        g = self.groups.get((ev.kind, ev.node))
        if g is None:
            g = self.groups[(ev.kind, ev.node)] = GroupTally()
        g.add(ev, key)
        if ev.node is not None and ev.evidence == "system":
            self.system_nodes.add(ev.node)
        if self.listed > 0:
            self._seq += 1
            item = (_Reverse(key), self._seq, ev)
            if len(self._top) < self.listed:
                heapq.heappush(self._top, item)
            elif key < self._top[0][0].key:
                heapq.heapreplace(self._top, item)

    def extend(self, events) -> None:
        for ev in events:
            self.add(ev)

    def top(self) -> list[Event]:
        """The first `listed` symptoms in verdict order."""
        return [ev for _, _, ev in sorted(self._top, key=lambda item: item[0].key)]

    def folded(self) -> list[tuple[Folded, float, int]]:
        """Every folded symptom key as (what correlation reads, its time, how many)."""
        out = []
        for (kind, outcome, role, source, node, gpu, t, links), n in self.weights.items():
            out.append((Folded(kind, outcome, role, source, node, gpu, dict(links)), t, n))
        return out


class _Reverse:
    """An order key reversed, so that heapq's min-heap keeps the largest of the smallest on top."""

    __slots__ = ("key",)

    def __init__(self, key: tuple) -> None:
        self.key = key

    def __lt__(self, other: _Reverse) -> bool:
        return other.key < self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and other.key == self.key

    __hash__ = None  # type: ignore[assignment]
