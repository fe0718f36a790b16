"""The "explains" relation of the causal graph between the placed events of one job. Pure.

`explains(edge, a, b)` is the definition (docs/verdict.md): cause `a` explains event `b` when an edge of the
graph matches both, they are at the edge's locality, `b` is not before `a` (clock tolerance) and within the
edge's time bound, and their link fields agree. `Relation` answers the questions correlate asks of it without
testing every pair: causes are indexed by signature and node and sorted by time, so a storm of thousands of
Xid or NCCL lines costs near-linear work, not the square of its length.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Iterator

from attribution.model import Event
from attribution.rulepack.values import CausalGraph, Edge

#: Log stamps often have one-second resolution: an event in the same second as its explainer is "after" it.
SAME_NODE_TOLERANCE = 1.0


class Placed:
    """An event with the time used for ordering (untimed events sit at the job end) and its index in time order.
    `w` is how many events it stands for: 1, or the count of a digest's folded symptoms (correlate.digest)."""

    __slots__ = ("ev", "t", "idx", "w")

    def __init__(self, ev: Event, t: float, idx: int, w: int = 1) -> None:
        self.ev = ev
        self.t = t
        self.idx = idx
        self.w = w


def signature(e: Event) -> tuple:
    return (e.kind, e.outcome, e.role, e.source)


def edge_explains(edge: Edge, a: Placed, b: Placed, skew: float) -> bool:
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


class _Group:
    """Events of one signature (on one node, or on all), sorted by (time, index)."""

    __slots__ = ("items", "times", "cum")

    def __init__(self) -> None:
        self.items: list[Placed] = []
        self.times: list[float] = []
        self.cum: list[int] = []  # cum[i]: how many events items[:i] stand for

    def add(self, p: Placed) -> None:
        self.items.append(p)

    def seal(self) -> None:
        self.items.sort(key=lambda p: (p.t, p.idx))
        self.times = [p.t for p in self.items]
        self.cum = [0]
        for p in self.items:
            self.cum.append(self.cum[-1] + p.w)

    def up_to(self, t: float) -> list[Placed]:
        return self.items[:bisect.bisect_right(self.times, t)]

    def from_(self, t: float) -> list[Placed]:
        return self.items[bisect.bisect_left(self.times, t):]

    def count_between(self, lo: float, hi: float) -> int:
        return self.cum[bisect.bisect_right(self.times, hi)] - self.cum[bisect.bisect_left(self.times, lo)]


class Relation:
    """Which causes explain which events, for one job's placed events."""

    def __init__(self, graph: CausalGraph, causes: list[Placed], placed: list[Placed]) -> None:
        self.graph = graph
        self.skew = float(graph.clock_skew_seconds)
        self.max_tol = max(SAME_NODE_TOLERANCE, self.skew)
        self._edges: dict[tuple, list[Edge]] = {}
        self.causes = self._index(causes)
        self.events = self._index(placed)

    @staticmethod
    def _index(items: list[Placed]) -> dict[tuple, tuple[_Group, dict[str | None, _Group]]]:
        out: dict[tuple, tuple[_Group, dict[str | None, _Group]]] = {}
        for p in items:
            every, by_node = out.setdefault(signature(p.ev), (_Group(), {}))
            every.add(p)
            by_node.setdefault(p.ev.node, _Group()).add(p)
        for every, by_node in out.values():
            every.seal()
            for g in by_node.values():
                g.seal()
        return out

    def edges(self, sig_a: tuple, sig_b: tuple) -> list[Edge]:
        key = (sig_a, sig_b)
        found = self._edges.get(key)
        if found is None:
            found = [e for e in self.graph.edges if e.causes.matches(*sig_a) and e.explains.matches(*sig_b)]
            self._edges[key] = found
        return found

    def explains(self, a: Placed, b: Placed, edges: list[Edge] | None = None) -> bool:
        """The definition, for one pair."""
        if a is b:
            return False
        ea, eb = a.ev, b.ev
        if ea.kind == eb.kind and ea.node != eb.node:
            return False  # two causes of the same kind on different nodes never explain each other
        if edges is None:
            edges = self.edges(signature(ea), signature(eb))
        return any(edge_explains(edge, a, b, self.skew) for edge in edges)

    @staticmethod
    def _local(sig_a: tuple, sig_b: tuple, edges: list[Edge]) -> bool:
        return sig_a[0] == sig_b[0] or all(e.locality in ("gpu", "node") for e in edges)

    def explainers(self, b: Placed) -> Iterator[Placed]:
        """Every cause that explains b, earliest first (ties by index), lazily."""
        sig_b = signature(b.ev)
        streams = []
        for sig_a, (every, by_node) in self.causes.items():
            edges = self.edges(sig_a, sig_b)
            if not edges:
                continue
            group = by_node.get(b.ev.node) if self._local(sig_a, sig_b, edges) else every
            if group is None:
                continue
            # a cause more than the largest tolerance after b never explains it
            streams.append(self._explaining(group.up_to(b.t + self.max_tol), b, edges))
        yield from heapq.merge(*streams, key=lambda a: (a.t, a.idx))

    def _explaining(self, candidates: list[Placed], b: Placed, edges: list[Edge]) -> Iterator[Placed]:
        for a in candidates:
            if self.explains(a, b, edges):
                yield a

    def count(self, a: Placed) -> int:
        """How many events a explains."""
        sig_a = signature(a.ev)
        n = 0
        for sig_b, (every, by_node) in self.events.items():
            edges = self.edges(sig_a, sig_b)
            if not edges:
                continue
            if self._local(sig_a, sig_b, edges):
                group = by_node.get(a.ev.node)
                groups = [] if group is None else [group]
            else:
                groups = [every]
            if len(edges) == 1 and edges[0].locality == "job" and not edges[0].link_fields \
                    and sig_a[0] != sig_b[0]:
                n += self._count_in_window(a, edges[0], every, by_node)
                continue
            for g in groups:
                n += sum(b.w for b in g.from_(a.t - self.max_tol) if self.explains(a, b, edges))
        return n

    def _count_in_window(self, a: Placed, edge: Edge, every: _Group, by_node: dict[str | None, _Group]) -> int:
        """Events of one signature that a explains through one job-wide edge without link fields: two ranges
        (the cross-node tolerance everywhere, the tighter same-node one on a's own node)."""
        within = float("inf") if edge.within_seconds is None else float(edge.within_seconds)
        wide, tight = self.max_tol, SAME_NODE_TOLERANCE
        n = every.count_between(a.t - wide, a.t + within + wide)
        own = by_node.get(a.ev.node) if a.ev.node is not None else None
        if own is not None:  # on a's node the window is [t - tight, t + within + tight]
            n -= own.count_between(a.t - wide, a.t + within + wide)
            n += own.count_between(a.t - tight, a.t + within + tight)
        return n
