"""Building a pack's values from its validated documents: one builder per file type, in one registry.

`BUILDERS` maps each `type:` to the function that turns its documents into values (in dependency order:
kinds first, since every other type names kinds). Builders check what a schema cannot (unknown kinds,
duplicate ids, regexes RE2 rejects, dangling catalog references) and record each as a `Problem`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable

import re2

from attribution.errors import Problem
from attribution.rulepack.prefilter import compile_re2, scan_pattern, search_set
from attribution.rulepack.values import (CatalogEntry, Catalog, CausalGraph, Condition, DrainPolicy, Edge, Example,
                                         IgnoreRule, JobStates, KindSpec, MetricRule, Redaction, RedactionExample,
                                         Redactions, Rule, Selector, StateDecision, Variant, matcher_patterns)
from attribution.rulepack.yamlload import Document


@dataclass
class Building:
    """What the builders have made so far, and every problem they found."""

    root: Path
    problems: list[Problem]
    kinds: dict[str, KindSpec] = field(default_factory=dict)
    catalogs: dict[str, Catalog] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    ignores: list[IgnoreRule] = field(default_factory=list)
    rule_ids: dict[str, str] = field(default_factory=dict)  # id -> where it was first defined
    graph: CausalGraph = field(default_factory=lambda: CausalGraph(edges=()))
    job_states: JobStates = field(default_factory=lambda: JobStates(
        MappingProxyType({}), StateDecision("unknown", "investigate", "low")))
    metric_rules: list[MetricRule] = field(default_factory=list)
    drain_policy: DrainPolicy | None = None
    redactions: Redactions = field(default_factory=Redactions)

    def add(self, doc: Document, path: list, message: str) -> None:
        self.problems.append(doc.problem(path, message))

    def need_kind(self, doc: Document, kind: str, path: list) -> None:
        if kind not in self.kinds:
            self.add(doc, path, f"unknown kind {kind!r} (not in the kinds file)")

    def need_catalog(self, doc: Document, name: str, path: list) -> None:
        if name not in self.catalogs:
            self.add(doc, path, f"unknown catalog {name!r}")

    def claim_id(self, doc: Document, rid: str, path: list) -> bool:
        """Record a rule id; False (and a problem) when another rule has it."""
        here = f"{doc.shown}:{doc.line(path)}"
        if rid in self.rule_ids:
            self.add(doc, path, f"rule id {rid!r} already used at {self.rule_ids[rid]}")
            return False
        self.rule_ids[rid] = here
        return True

    def regex(self, doc: Document, pattern: str, path: list):
        try:
            return compile_re2(pattern)
        except re2.error as exc:
            msg = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            self.add(doc, path, f"pattern rejected by RE2 (linear-time engine): {msg}")
            return None

    def exactly_one(self, docs: list[Document], ftype: str, what: str) -> Document | None:
        if len(docs) != 1:
            self.problems.append(Problem(str(self.root), None,
                                         f"expected exactly one {what} file (type: {ftype}), found {len(docs)}"))
            return None
        return docs[0]


def build_kinds(b: Building, docs: list[Document]) -> None:
    for doc in docs:
        for name, spec in doc.data["kinds"].items():
            if name in b.kinds:
                b.add(doc, ["kinds", name], f"kind {name!r} defined twice")
                continue
            b.kinds[name] = KindSpec(name=name, role=spec["role"], summary=spec["summary"],
                                     outcome=spec.get("outcome"), action=spec.get("action"),
                                     severity=spec.get("severity", "info"), life=spec.get("life"),
                                     hint=MappingProxyType(dict(spec["hint"])) if spec.get("hint") else None)
    if not b.kinds:
        b.problems.append(Problem(str(b.root), None, "no kinds file (type: kinds)"))


def _expand_codes(entry: dict) -> list[int]:
    if "code" in entry:
        return [int(entry["code"])]
    out: list[int] = []
    for c in entry.get("codes", []):
        if isinstance(c, int):
            out.append(c)
        else:
            a, z = (int(x) for x in str(c).split("-"))
            out.extend(range(a, z + 1))
    return out


def _variants(b: Building, doc: Document, entry: dict, path: list) -> tuple[Variant, ...]:
    sets = doc.data.get("variant_sets", {})
    variants = entry.get("variants", ())
    vpath = path + ["variants"]
    if isinstance(variants, str):
        if variants not in sets:
            b.add(doc, vpath, f"unknown variant set {variants!r}")
            return ()
        vpath = ["variant_sets", variants]
        variants = sets[variants]
    built = []
    for j, v in enumerate(variants):
        b.need_kind(doc, v["kind"], vpath + [j, "kind"])
        when = tuple((fname, b.regex(doc, rx, vpath + [j, "when", fname])) for fname, rx in v["when"].items())
        built.append(Variant(when, v["kind"], v.get("action"), v.get("severity")))
    return tuple(built)


def build_catalogs(b: Building, docs: list[Document]) -> None:
    for doc in docs:
        data = doc.data
        name = data["name"]
        if name in b.catalogs:
            b.add(doc, ["name"], f"catalog {name!r} defined twice")
            continue
        entries: dict[int, CatalogEntry] = {}
        for i, e in enumerate(data["entries"]):
            path = ["entries", i]
            b.need_kind(doc, e["kind"], path + ["kind"])
            variants = _variants(b, doc, e, path)
            fields = tuple((fname, b.regex(doc, rx, path + ["fields", fname]))
                           for fname, rx in (e.get("fields") or {}).items())
            for code in _expand_codes(e):
                if code in entries:
                    b.add(doc, path, f"code {code} listed twice in catalog {name!r}")
                entries[code] = CatalogEntry(code=code, kind=e["kind"], action=e.get("action"),
                                             severity=e.get("severity"), mnemonic=e.get("mnemonic"),
                                             description=e.get("description"), variants=variants, fields=fields)
        default = None
        if data.get("default"):
            d = data["default"]
            b.need_kind(doc, d["kind"], ["default", "kind"])
            default = CatalogEntry(code=-1, kind=d["kind"], action=d.get("action"), severity=d.get("severity"),
                                   variants=_variants(b, doc, d, ["default"]))
        b.catalogs[name] = Catalog(name, MappingProxyType(entries), default,
                                   MappingProxyType(dict(data["provenance"])))


def _only_leading_anchor(pattern: str) -> bool:
    return "^" not in pattern[1:].replace("[^", "").replace("\\^", "")


def build_rules(b: Building, docs: list[Document]) -> None:
    for doc in docs:
        for i, r in enumerate(doc.data["rules"]):
            path = ["rules", i]
            rid = r["id"]
            if not b.claim_id(doc, rid, path):
                continue
            pattern = r["pattern"]
            rx = _message_regex(b, doc, pattern, path)
            pre = r.get("prefilter") or scan_pattern(pattern)
            b.regex(doc, pre, path + ["prefilter" if "prefilter" in r else "pattern"])
            if "kind" in r:
                b.need_kind(doc, r["kind"], path + ["kind"])
            if "catalog" in r:
                b.need_catalog(doc, r["catalog"], path + ["catalog"])
            for k in r.get("unless_kinds", []):
                b.need_kind(doc, k, path + ["unless_kinds"])
            if rx is not None and "catalog" in r and "code" not in rx.groupindex and "code" not in r:
                b.add(doc, path + ["pattern"], "a catalog rule must capture (?P<code>...)")
            b.rules.append(Rule(
                id=rid, source=r["source"], sources=_sources(r), pattern=pattern, regex=rx, prefilter=pre,
                hook_filter=tuple(r.get("hook_filter", ())),
                kind=r.get("kind"), catalog=r.get("catalog"), code=r.get("code"), role=r.get("role"),
                action=r.get("action"), severity=r.get("severity"),
                require_flags=frozenset(r.get("require_flags", [])),
                unless_kinds=frozenset(r.get("unless_kinds", [])),
                unless_flags=frozenset(r.get("unless_flags", [])),
                set_fields=tuple(sorted((r.get("set_fields") or {}).items())),
                examples=_examples(r), no_match=tuple(r["examples"].get("no_match", [])),
                path=doc.shown, line=doc.line(path)))
        for i, r in enumerate(doc.data.get("ignore", [])):
            _build_ignore(b, doc, r, ["ignore", i])


def _message_regex(b: Building, doc: Document, pattern: str, path: list):
    """A rule's or ignore entry's pattern compiled (None and a problem when RE2 refuses it); a problem when '^'
    anchors anything but its start."""
    if not _only_leading_anchor(pattern):
        b.add(doc, path + ["pattern"], "'^' may only anchor the start of a pattern (it matches the start "
                                       "of the message, after the prefix)")
    return b.regex(doc, pattern, path + ["pattern"])


def _sources(r: dict) -> tuple[str, ...]:
    return (r["source"],) + tuple(s for s in r.get("also_sources", []) if s != r["source"])


def _examples(r: dict) -> tuple[Example, ...]:
    return tuple(Example(line=ex["line"], source=ex.get("source", r["source"]),
                         expect=MappingProxyType(dict(ex.get("expect") or {})), ref=ex.get("ref"))
                 for ex in r["examples"]["match"])


def _build_ignore(b: Building, doc: Document, r: dict, path: list) -> None:
    """An `ignore:` entry: a pattern of lines that mean nothing, with its examples (pipeline.rulecheck runs them)."""
    if not b.claim_id(doc, r["id"], path):
        return
    rx = _message_regex(b, doc, r["pattern"], path)
    if rx is not None:
        b.ignores.append(IgnoreRule(id=r["id"], source=r["source"], sources=_sources(r), pattern=r["pattern"],
                                    regex=rx, description=r["description"], examples=_examples(r),
                                    no_match=tuple(r["examples"]["no_match"]), path=doc.shown,
                                    line=doc.line(path)))


def _selector(d: dict) -> Selector:
    return Selector(kinds=frozenset(d.get("kinds", [])), outcomes=frozenset(d.get("outcomes", [])),
                    roles=frozenset(d.get("roles", [])), sources=frozenset(d.get("sources", [])))


def build_causal_graph(b: Building, docs: list[Document]) -> None:
    doc = b.exactly_one(docs, "causal_graph", "causal graph")
    if doc is None:
        return
    edges = []
    for i, e in enumerate(doc.data["edges"]):
        for side in ("causes", "explains"):
            for j, k in enumerate(e[side].get("kinds", [])):
                b.need_kind(doc, k, ["edges", i, side, "kinds", j])
        edges.append(Edge(id=e["id"], causes=_selector(e["causes"]), explains=_selector(e["explains"]),
                          locality=e["locality"], within_seconds=e.get("within_seconds"),
                          link_fields=tuple((x, y) for x, y in e.get("link_fields", []))))
    w = doc.data.get("window", {})
    b.graph = CausalGraph(edges=tuple(edges), before_start_seconds=w.get("before_start_seconds", 300),
                          after_end_seconds=w.get("after_end_seconds", 300),
                          clock_skew_seconds=doc.data.get("clock_skew_seconds", 0))


def _decision(d: dict) -> StateDecision:
    return StateDecision(outcome=d["outcome"], action=d["action"], confidence=d["confidence"],
                         culprit=d.get("culprit", "none"), final=bool(d.get("final", False)))


def build_job_states(b: Building, docs: list[Document]) -> None:
    doc = b.exactly_one(docs, "job_states", "job states")
    if doc is None:
        return
    b.job_states = JobStates(MappingProxyType({k.upper(): _decision(v) for k, v in doc.data["states"].items()}),
                             _decision(doc.data["failed"]))


def build_metric_rules(b: Building, docs: list[Document]) -> None:
    """Metric rules (evaluated by attribution.extract.metrics), with label names from the file and the rule."""
    for doc in docs:
        defaults = dict(doc.data.get("labels") or {})
        for i, r in enumerate(doc.data["rules"]):
            path = ["rules", i]
            b.claim_id(doc, r["id"], path)
            if "kind" in r:
                b.need_kind(doc, r["kind"], path + ["kind"])
            if "catalog" in r:
                b.need_catalog(doc, r["catalog"], path + ["catalog"])
            if "min_increase" in r and r["trigger"] != "increase":
                b.add(doc, path + ["min_increase"], "min_increase needs trigger 'increase'")
            for j, ex in enumerate(r["examples"]):
                for k, exp in enumerate(ex["expect"]):
                    if "kind" in exp:
                        b.need_kind(doc, exp["kind"], path + ["examples", j, "expect", k, "kind"])
            b.metric_rules.append(MetricRule(
                id=r["id"], metric=r["metric"], trigger=r["trigger"],
                labels=MappingProxyType({**defaults, **(r.get("labels") or {})}),
                kind=r.get("kind"), catalog=r.get("catalog"), code=r.get("code"),
                min_increase=float(r.get("min_increase", 1)), role=r.get("role"), action=r.get("action"),
                severity=r.get("severity"), examples=tuple(MappingProxyType(dict(e)) for e in r["examples"]),
                path=doc.shown))


def build_counter_rules(b: Building, docs: list[Document]) -> None:
    """Counter rules (interpreted by attribution.extract.counters): their kinds and ids are checked here."""
    for doc in docs:
        for i, r in enumerate(doc.data["rules"]):
            path = ["rules", i]
            b.claim_id(doc, r["id"], path)
            b.need_kind(doc, r["kind"], path + ["kind"])
            if "min_increase" in r and r["trigger"] != "increase":
                b.add(doc, path + ["min_increase"], "min_increase needs trigger 'increase'")
            if "where" in r and r["device"] != "pci":
                b.add(doc, path + ["where"], "'where' applies to device 'pci' only")
            if "pattern" in r:
                try:
                    rx = re.compile(r["pattern"])
                except re.error as exc:
                    b.add(doc, path + ["pattern"], f"not a regular expression: {exc}")
                else:
                    if r.get("gpus") == "named" and "gpu" not in rx.groupindex:
                        b.add(doc, path + ["pattern"], "gpus 'named' needs a (?P<gpu>...) group")
            for j, ex in enumerate(r["examples"]):
                for k, exp in enumerate(ex["expect"]):
                    if "kind" in exp:
                        b.need_kind(doc, exp["kind"], path + ["examples", j, "expect", k, "kind"])


def build_drain_policy(b: Building, docs: list[Document]) -> None:
    """The drain policy's typed value (its semantic checks are drain.policy.policy_problems, run by `rules check`)."""
    if len(docs) != 1:
        return  # none, or several: policy_problems says so when the policy is used or checked
    doc = docs[0].data
    caps = doc["caps"]
    conds = []
    for c in doc["conditions"]:
        # a recurrence condition holds one of the two forms under `recurrence:` and counts all of its evidence,
        # also what came before the node's last reboot or resume (docs/drain.md "Recurrence")
        form = c.get("recurrence") or c
        culprit = form.get("culprit_of_failed_jobs")
        conds.append(Condition(id=c["id"], min_count=int(c["min_count"]), window_days=int(c["window_days"]),
                               label=c.get("label") or c["id"], score=float(c["score"]),
                               kinds=tuple(form.get("kinds", ())), per=form.get("per"), distinct=form.get("distinct"),
                               culprit_distinct=culprit["distinct"] if culprit else None,
                               recurrence="recurrence" in c))
    version = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    b.drain_policy = DrainPolicy(version=version, reason_prefix=doc["reason_prefix"],
                                 max_fraction_drained=float(caps["max_fraction_drained"]),
                                 min_nodes_allowed=int(caps.get("min_nodes_allowed", 0)),
                                 max_drains_per_hour=int(caps["max_drains_per_hour"]), conditions=tuple(conds),
                                 document=doc)


#: The capture group of a redaction pattern that is the secret (the rest of the match is left as it is).
SECRET_GROUP = "secret"


def build_redactions(b: Building, docs: list[Document]) -> None:
    """The redaction patterns (applied by attribution.extract.redact), in file order over the files' order."""
    patterns: list[Redaction] = []
    for doc in docs:
        for i, r in enumerate(doc.data["patterns"]):
            path = ["patterns", i]
            if not b.claim_id(doc, r["id"], path):
                continue
            rx = b.regex(doc, r["pattern"], path + ["pattern"])
            if rx is None:
                continue
            names = set(rx.groupindex)
            if names - {SECRET_GROUP}:
                b.add(doc, path + ["pattern"], f"a redaction pattern captures only (?P<{SECRET_GROUP}>...), not "
                                               f"{', '.join(sorted(names - {SECRET_GROUP}))}")
            examples = tuple(RedactionExample(line=e["line"], span=e["span"], ref=e.get("ref"))
                             for e in r["examples"]["redact"])
            for j, e in enumerate(examples):
                if e.span not in e.line:
                    b.add(doc, path + ["examples", "redact", j, "span"], "the span is not in the line")
            patterns.append(Redaction(
                id=r["id"], kind=r["kind"], pattern=r["pattern"], regex=rx, group=rx.groupindex.get(SECRET_GROUP, 0),
                min_entropy=float(r.get("min_entropy", 0.0)), examples=examples,
                no_match=tuple(r["examples"]["keep"]), path=doc.shown, line=doc.line(path)))
    if patterns:
        b.redactions = Redactions(tuple(patterns), search_set(matcher_patterns(patterns)))


#: Each file type and its builder, in the order they run (a type's builder may use what earlier ones built).
BUILDERS: dict[str, Callable[[Building, list[Document]], None]] = {
    "kinds": build_kinds,
    "catalog": build_catalogs,
    "rules": build_rules,
    "causal_graph": build_causal_graph,
    "job_states": build_job_states,
    "metric_rules": build_metric_rules,
    "counter_rules": build_counter_rules,
    "drain_policy": build_drain_policy,
    "redactions": build_redactions,
}
