"""Log-template mining: Drain (He, Zhu, Zheng and Lyu, "Drain: An Online Log Parsing Approach with Fixed Depth
Tree", ICWS 2017), the algorithm of the drain3 package, written here for `rules suggest`. Pure.

A message is split on whitespace into tokens. Messages with the same number of tokens and the same first
`prefix_tokens` tokens (a token with a digit in it counts as a parameter there) land in one leaf of the parse tree;
in the leaf a message joins the template it is most similar to (the share of the template's literal tokens equal
at the same place), when that share is at least `similarity`; otherwise it starts a template of its own. Joining
turns every token where the two differ into `<*>`.

The defaults are drain3's (sim_th 0.4, depth 4, max_children 100, numeric tokens as parameters), so the templates
are the ones drain3 gives on the same input in the same order. Why not drain3 itself: its last release is 0.9.11
of July 2022, classified for Python 3.6 and 3.7 only, it pins jsonpickle==1.5.1 and cachetools==4.2.1 exactly
(a resolver conflict for any environment with newer ones) and restores its state with jsonpickle; the part we use
is the ~100 lines below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PARAM = "<*>"


@dataclass
class Cluster:
    """One template: its tokens (`<*>` where its messages differ) and how many messages joined it."""

    id: int
    tokens: tuple[str, ...]
    size: int = 1

    @property
    def template(self) -> str:
        return " ".join(self.tokens)


@dataclass
class _Node:
    children: dict[str, "_Node"] = field(default_factory=dict)
    clusters: list[int] = field(default_factory=list)


def _has_digit(token: str) -> bool:
    return any(c.isdigit() for c in token)


class Drain:
    """An online template miner: `add` each message in turn, then read `clusters` (in the order they were made)."""

    def __init__(self, similarity: float = 0.4, prefix_tokens: int = 1, max_children: int = 100,
                 numbers_are_parameters: bool = True) -> None:
        if not 0.0 <= similarity <= 1.0:
            raise ValueError("similarity must be between 0 and 1")
        if prefix_tokens < 0 or max_children < 2:
            raise ValueError("prefix_tokens must be >= 0 and max_children >= 2")
        self.similarity = similarity
        self.prefix_tokens = prefix_tokens
        self.max_children = max_children
        self.numbers_are_parameters = numbers_are_parameters
        self._root: dict[int, _Node] = {}
        self._clusters: list[Cluster] = []

    @property
    def clusters(self) -> list[Cluster]:
        return list(self._clusters)

    def add(self, message: str) -> Cluster:
        """Put one message in its template (made or widened); returns that template."""
        tokens = tuple(message.split())
        leaf = self._leaf(tokens, create=False)
        best = self._best(leaf, tokens) if leaf is not None else None
        if best is None:
            best = Cluster(len(self._clusters) + 1, tokens)
            self._clusters.append(best)
            node = self._leaf(tokens, create=True)
            node.clusters = [best.id] if not tokens else node.clusters + [best.id]
            return best
        best.tokens = tuple(t if t == m else PARAM for t, m in zip(best.tokens, tokens))
        best.size += 1
        return best

    def _path(self, tokens: tuple[str, ...]) -> tuple[str, ...]:
        """The tokens that route a message below its length node: the first `prefix_tokens`, never the last."""
        return tokens[:min(self.prefix_tokens, max(0, len(tokens) - 1))]

    def _leaf(self, tokens: tuple[str, ...], create: bool) -> _Node | None:
        node = self._root.get(len(tokens))
        if node is None:
            if not create:
                return None
            node = self._root[len(tokens)] = _Node()
        for tok in self._path(tokens):
            node = self._child(node, tok) if create else node.children.get(tok, node.children.get(PARAM))
            if node is None:
                return None
        return node

    def _child(self, node: _Node, tok: str) -> _Node:
        """The child a new template takes for `tok`; made when missing. A numeric token, and every token once the
        node has `max_children` children, go to the parameter child."""
        if tok in node.children:
            return node.children[tok]
        n = len(node.children)
        if self.numbers_are_parameters and _has_digit(tok):
            key = PARAM
        elif PARAM in node.children:
            key = tok if n < self.max_children else PARAM
        else:
            key = tok if n + 1 < self.max_children else PARAM
        return node.children.setdefault(key, _Node())

    def _best(self, leaf: _Node, tokens: tuple[str, ...]) -> Cluster | None:
        """The most similar template of the leaf (ties: the one with more parameters, then the older), if similar
        enough."""
        best, best_key = None, (-1.0, -1)
        for cid in leaf.clusters:
            c = self._clusters[cid - 1]
            key = similarity(c.tokens, tokens)
            if key > best_key:
                best, best_key = c, key
        return best if best is not None and best_key[0] >= self.similarity else None


def similarity(template: tuple[str, ...], tokens: tuple[str, ...]) -> tuple[float, int]:
    """(share of the template's places whose literal token equals the message's, number of parameters)."""
    if not template:
        return 1.0, 0
    params = sum(1 for t in template if t == PARAM)
    same = sum(1 for t, m in zip(template, tokens) if t != PARAM and t == m)
    return same / len(template), params
