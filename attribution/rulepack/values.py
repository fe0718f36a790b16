"""The values of a loaded rule pack: frozen, valid, built once by `rulepack.load` (the engine never re-checks)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping

from attribution.frozen import Value, field
from attribution.rulepack.prefilter import Prefilter

#: Capture group names with a meaning for the engine; rules may capture others, they become event fields.
SPECIAL_GROUPS = frozenset({"gpu", "code", "rank", "host", "ts", "node", "task"})

class KindSpec(Value):
    """An event kind of the pack's vocabulary: its role, summary and the hint it may carry."""

    name: str
    role: str
    summary: str
    outcome: str | None = None
    action: str | None = None
    severity: str = "info"
    hint: Mapping[str, Any] | None = None
    life: str | None = None  # `boot`: the kind marks a change in the node's life (kept in node_life, not as an event)


class Variant(Value):
    """A rule's alternative kind (and action, outcome) when its captured fields match."""

    when: tuple[tuple[str, Any], ...]
    kind: str
    action: str | None = None
    severity: str | None = None

    def applies(self, fields: Mapping[str, str]) -> bool:
        for name, rx in self.when:
            value = fields.get(name)
            if value is None or not rx.search(value):
                return False
        return True


class CatalogEntry(Value):
    """One code of a catalog (an Xid, an SXid): the kind, action and outcome it means."""

    code: int
    kind: str
    action: str | None = None
    severity: str | None = None
    mnemonic: str | None = None
    description: str | None = None
    variants: tuple[Variant, ...] = ()
    fields: tuple[tuple[str, Any], ...] = ()


class Catalog(Value):
    """A code catalog (Xid, SXid) with the entry for codes it does not list."""

    name: str
    entries: Mapping[int, CatalogEntry]
    default: CatalogEntry | None
    provenance: Mapping[str, Any]

    def lookup(self, code: int | None) -> CatalogEntry | None:
        if code is not None and code in self.entries:
            return self.entries[code]
        return self.default


class Example(Value):
    """A real line a rule must match (with what it must give) or must not match."""

    line: str
    source: str
    expect: Mapping[str, Any]
    ref: str | None = None


class LinePattern(Value):
    """What a rule and an ignore entry share: an id, the sources it applies to, its message pattern compiled."""

    id: str
    source: str
    sources: tuple[str, ...]
    pattern: str
    regex: Any


class Rule(LinePattern):
    """One extraction rule: where it applies, its pattern, the event it makes, its examples."""

    prefilter: str
    hook_filter: tuple[str, ...]
    kind: str | None
    catalog: str | None
    code: int | None
    role: str | None
    action: str | None
    severity: str | None
    require_flags: frozenset[str]
    unless_kinds: frozenset[str]
    unless_flags: frozenset[str]
    set_fields: tuple[tuple[str, str], ...]
    examples: tuple[Example, ...]
    no_match: tuple[str, ...]
    path: str
    line: int


class IgnoreRule(LinePattern):
    """A line a person looked at and found to mean nothing (advice printed after an error, a header whose
    message is on the next line): it makes no event, and `rules suggest` does not offer it as a rule to write."""

    description: str
    examples: tuple[Example, ...]
    no_match: tuple[str, ...]
    path: str
    line: int


class Selector(Value):
    """Which events one side of a causal edge covers (kinds, outcomes, roles, fields)."""

    kinds: frozenset[str] = frozenset()
    outcomes: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()

    def matches(self, kind: str, outcome: str | None, role: str, source: str) -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        if self.outcomes and outcome not in self.outcomes:
            return False
        if self.roles and role not in self.roles:
            return False
        if self.sources and source not in self.sources:
            return False
        return True


class Edge(Value):
    """A causal graph edge: events its causes side selects explain those its explains side selects."""

    id: str
    causes: Selector
    explains: Selector
    locality: str  # gpu | node | job
    within_seconds: int | None
    link_fields: tuple[tuple[str, str], ...] = ()


class CausalGraph(Value):
    """The pack's causal graph: its edges, and how far around a job and across clocks its evidence may lie."""

    edges: tuple[Edge, ...]
    before_start_seconds: int = 300
    after_end_seconds: int = 300
    clock_skew_seconds: int = 0

    def margins(self) -> tuple[timedelta, timedelta]:
        """How far before a job's start and after its end its evidence may lie (the graph's `window:`)."""
        return timedelta(seconds=self.before_start_seconds), timedelta(seconds=self.after_end_seconds)


class StateDecision(Value):
    """What a Slurm job state alone says when no event explains the failure."""

    outcome: str
    action: str
    confidence: str
    culprit: str = "none"
    final: bool = False


class JobStates(Value):
    """The pack's decisions per Slurm job state."""

    states: Mapping[str, StateDecision]
    failed: StateDecision

    def decide(self, state: str) -> StateDecision:
        return self.states.get(state, self.failed)

class MetricRule(Value):
    """Which change of a metric series is a fault event (rules/metrics.yaml; evaluated by extract.metrics)."""

    id: str
    metric: str
    trigger: str
    labels: Mapping[str, str]  # label role -> label name
    kind: str | None = None
    catalog: str | None = None
    code: int | None = None
    min_increase: float = 1.0
    role: str | None = None
    action: str | None = None
    severity: str | None = None
    examples: tuple[Mapping[str, Any], ...] = ()
    path: str = ""

    def label(self, role: str) -> str | None:
        return self.labels.get(role)


class Condition(Value):
    """One condition of the drain policy: how many faults of which kinds within how many days."""

    id: str
    min_count: int
    window_days: int
    label: str
    score: float
    kinds: tuple[str, ...] = ()
    per: str | None = None
    distinct: str | None = None
    culprit_distinct: str | None = None
    #: counts all of its evidence within the window, also what came before the node's last reboot or resume
    #: (the others, one-shot conditions, count only what came after)
    recurrence: bool = False


class DrainPolicy(Value):
    """The drain policy (rules/drain-policy.yaml): its conditions and its safety caps."""

    version: str
    reason_prefix: str
    max_fraction_drained: float
    min_nodes_allowed: int
    max_drains_per_hour: int
    conditions: tuple[Condition, ...]
    document: Mapping[str, Any] = field(default_factory=dict)

    @property
    def caps(self) -> dict:
        return {"max_fraction_drained": self.max_fraction_drained, "min_nodes_allowed": self.min_nodes_allowed,
                "max_drains_per_hour": self.max_drains_per_hour}


class RedactionExample(Value):
    """A real line a redaction pattern must redact, with the span (`span`) that must become `[redacted:KIND]`."""

    line: str
    span: str
    ref: str | None = None


class Redaction(Value):
    """One redaction pattern (rules/redactions.yaml): what it finds, the group that is the secret (0: the whole
    match), the entropy a found span must have to count (bits per character; 0: any), and its examples."""

    id: str
    kind: str
    pattern: str
    regex: Any
    group: int = 0
    min_entropy: float = 0.0
    examples: tuple[RedactionExample, ...] = ()
    no_match: tuple[str, ...] = ()
    path: str = ""
    line: int = 0

    @property
    def marker(self) -> str:
        return f"[redacted:{self.kind}]"


class Redactions(Value):
    """The pack's redaction patterns, in file order (an earlier pattern's redaction is not redacted again), and
    one RE2 set of them (`matcher_patterns`: each in multi-line mode) that says which may match a text (None: no
    patterns, nothing is ever redacted)."""

    patterns: tuple[Redaction, ...] = ()
    matcher: Any = None

    def candidates(self, text: str) -> list[Redaction]:
        """The patterns that may match somewhere in `text` (one set pass), in file order (a superset: each
        pattern's own regex decides)."""
        if self.matcher is None or not text:
            return []
        idx = self.matcher.Match(text)
        return [self.patterns[i] for i in sorted(idx)] if idx else []

    def any_in(self, *texts: str) -> bool:
        """Whether any pattern may match any of `texts`, in one set pass over them joined by newlines (a pattern
        matching one of them alone matches the joined text: multi-line mode gives each its own ^ and $)."""
        return self.matcher is not None and bool(self.matcher.Match("\n".join(texts)))


def matcher_patterns(patterns) -> list[str]:
    """The redaction patterns as the pack's set holds them: each in multi-line mode (see Redactions.any_in)."""
    return [f"(?m:{p.pattern})" for p in patterns]


class RuleSet(Value):
    """A loaded rule pack: kinds, rules, catalogs, the causal graph, job states, metric rules, drain policy."""

    root: str
    version: str
    kinds: Mapping[str, KindSpec]
    rules: tuple[Rule, ...]
    catalogs: Mapping[str, Catalog]
    graph: CausalGraph
    job_states: JobStates
    metric_rules: tuple[MetricRule, ...] = ()
    drain_policy: DrainPolicy | None = None
    #: what is redacted from every line before it is matched or kept (rules/redactions.yaml; none: nothing)
    redactions: Redactions = field(default_factory=Redactions)
    documents: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)
    _by_source: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    _sets: Mapping[str, Any] = field(default_factory=dict)
    _prefilters: Mapping[str, Prefilter] = field(default_factory=dict)
    #: The error-looking lines' filter (replay/error-lines.txt: what is kept for replay besides the prefilter
    #: hits), built with the pack so that the node agent's cache holds it compiled. None: build it on use.
    errorlike: Prefilter | None = None
    #: Lines deliberately left without an event (`ignore:` of a rules file).
    ignores: tuple[IgnoreRule, ...] = ()

    def ignoring(self, source: str, text: str) -> list[IgnoreRule]:
        """The ignore entries of `source` whose pattern matches `text` (the message after the line's prefix)."""
        return [r for r in self.ignores if source in r.sources and r.regex.search(text)]

    def rules_for(self, source: str) -> tuple[Rule, ...]:
        return self._by_source.get(source, ())

    def matching(self, source: str, text: str) -> list[Rule]:
        """Rules of `source` whose pattern matches `text` (one RE2 set pass, then only those rules run)."""
        s = self._sets.get(source)
        if s is None:
            return []
        idx = s.Match(text)
        if not idx:
            return []
        rules = self._by_source[source]
        return [rules[i] for i in sorted(idx)]

    def prefilter(self, source: str) -> Prefilter:
        return self._prefilters.get(source) or Prefilter(())

    def warm(self) -> None:
        """Every prefilter's Hyperscan database loaded or compiled (the service's workers, at their start)."""
        for pf in self._prefilters.values():
            pf.warm()
        if self.errorlike is not None:
            self.errorlike.warm()

    def document(self, type_: str) -> list[tuple[str, Any]]:
        """The validated documents of a type as loaded, `(path, data)` each (the drain policy's checks read them)."""
        return list(self.documents.get(type_, ()))
