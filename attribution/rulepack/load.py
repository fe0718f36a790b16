"""Loading a rule pack: YAML files validated once, at the boundary, into a frozen RuleSet.

Every problem is reported as `path:line: message` (schema violations, bad regexes, unknown kinds, duplicate
ids, dangling catalog references). The engine (extract, correlate) never re-checks what this module accepted.
Every pattern is compiled with RE2, a linear-time engine, so no rule can backtrack catastrophically.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import re2

from attribution.errors import RulePackError

SCHEMA_DIR_NAME = "schema"
#: The `type:` of each file the engine understands, and its schema file.
FILE_TYPES = {
    "rules": "rules.schema.json",
    "kinds": "kinds.schema.json",
    "catalog": "catalog.schema.json",
    "causal_graph": "causal_graph.schema.json",
    "job_states": "job_states.schema.json",
    "drain_policy": "drain_policy.schema.json",
    "metric_rules": "metric_rules.schema.json",
    "counter_rules": "counter_rules.schema.json",
}
#: Capture group names with a meaning for the engine; rules may capture others, they become event fields.
SPECIAL_GROUPS = frozenset({"gpu", "code", "rank", "host", "ts", "node", "task"})


def _options() -> re2.Options:
    o = re2.Options()
    o.log_errors = False
    o.max_mem = 64 << 20
    return o


def compile_re2(pattern: str | bytes):
    """Compile with RE2 (linear time). Raises re2.error for syntax RE2 does not accept (backreferences, lookaround)."""
    return re2.compile(pattern, _options())


# -- values of a loaded pack ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KindSpec:
    name: str
    role: str
    summary: str
    outcome: str | None = None
    action: str | None = None
    severity: str = "info"
    hint: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Variant:
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


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    code: int
    kind: str
    action: str | None = None
    severity: str | None = None
    mnemonic: str | None = None
    description: str | None = None
    variants: tuple[Variant, ...] = ()
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Catalog:
    name: str
    entries: Mapping[int, CatalogEntry]
    default: CatalogEntry | None
    provenance: Mapping[str, Any]

    def lookup(self, code: int | None) -> CatalogEntry | None:
        if code is not None and code in self.entries:
            return self.entries[code]
        return self.default


@dataclass(frozen=True, slots=True)
class Example:
    line: str
    source: str
    expect: Mapping[str, Any]
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    source: str
    sources: tuple[str, ...]
    pattern: str
    regex: Any
    prefilter: str
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


@dataclass(frozen=True, slots=True)
class Selector:
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


@dataclass(frozen=True, slots=True)
class Edge:
    id: str
    causes: Selector
    explains: Selector
    locality: str  # gpu | node | job
    within_seconds: int | None
    link_fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CausalGraph:
    edges: tuple[Edge, ...]
    before_start_seconds: int = 300
    after_end_seconds: int = 300
    clock_skew_seconds: int = 0


@dataclass(frozen=True, slots=True)
class StateDecision:
    outcome: str
    action: str
    confidence: str
    culprit: str = "none"
    final: bool = False


@dataclass(frozen=True, slots=True)
class JobStates:
    states: Mapping[str, StateDecision]
    failed: StateDecision

    def decide(self, state: str) -> StateDecision:
        return self.states.get(state, self.failed)


class Prefilter:
    """One pass over raw bytes finding every line any rule of a source could match.

    RE2 decides which lines match (one alternation of the rules' patterns, searched again from the next line
    after each hit). When Hyperscan is installed (SIMD multi-pattern automata, linear time like RE2, several
    times faster) it goes first over windows of ~64 KB cut at line ends and stops at the first match; RE2 then
    only searches the windows with a match. The lines found are RE2's either way; Hyperscan only skips the
    windows without any, which at realistic fault rates is nearly all of a log.
    """

    __slots__ = ("_rx", "pattern", "patterns", "_hs", "_hs_tried")

    WINDOW = 64 << 10

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        alts = [f"(?:{p})" for p in self.patterns]
        self.pattern = "(?m)" + "|".join(alts) if alts else r"(?m)\A\z"
        self._rx = compile_re2(self.pattern.encode("utf-8"))
        self._hs = None
        self._hs_tried = False

    def find(self, block: bytes) -> list[int]:
        """Sorted offsets, one on each line with a match."""
        if not self._hs_tried:
            self._hs_tried = True
            self._hs = hyperscan_database(self.patterns)
        if self._hs is None:
            return self.find_re2(block)
        out: list[int] = []
        view = memoryview(block)
        n = len(block)
        pos = 0
        while pos < n:
            end = pos + self.WINDOW
            if end >= n:
                end = n
            else:
                nl = block.find(b"\n", end)
                end = n if nl < 0 else nl + 1
            if self._any(view[pos:end]):
                out += self.find_re2(block, pos, end)
            pos = end
        return out

    def _any(self, window) -> bool:
        import hyperscan

        try:
            self._hs.scan(window, match_event_handler=_stop)
        except hyperscan.ScanTerminated:
            return True
        except TypeError:
            if isinstance(window, bytes):
                raise
            # hyperscan 0.7.8 (the last release with Python 3.9 wheels) scans bytes only, not a memoryview
            return self._any(bytes(window))
        return False

    def find_re2(self, block: bytes, pos: int = 0, endpos: int | None = None) -> list[int]:
        # search again from the next line after each hit: resuming at the end of the match would skip the next
        # line when a match runs on past its line (`\s*` eats a newline)
        endpos = len(block) if endpos is None else endpos
        out = []
        search = self._rx.search
        while pos < endpos and (m := search(block, pos, endpos)) is not None:
            start = m.start()
            out.append(start)
            nl = block.find(b"\n", start, endpos)
            if nl < 0:
                break
            pos = nl + 1
        return out


def _stop(*_args) -> bool:
    return True  # a match: stop scanning this window


def hyperscan_database(patterns: tuple[str, ...]):
    """A Hyperscan block-mode database of the patterns (multi-line), or None when
    Hyperscan is not installed (it has wheels for x86-64 Linux) or refuses a pattern."""
    if not patterns:
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    flags = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY | hyperscan.HS_FLAG_SINGLEMATCH
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[p.encode("utf-8") for p in patterns], ids=list(range(len(patterns))),
                   elements=len(patterns), flags=[flags] * len(patterns))
    except hyperscan.error:
        return None
    return db


class AllLines:
    """A prefilter that selects every line (for tests that want to see all observations)."""

    _rx = None

    def find(self, block: bytes) -> list[int]:
        out = [0] if block else []
        i = block.find(b"\n")
        while i >= 0 and i + 1 < len(block):
            out.append(i + 1)
            i = block.find(b"\n", i + 1)
        return out


@dataclass(frozen=True)
class RuleSet:
    root: str
    version: str
    kinds: Mapping[str, KindSpec]
    rules: tuple[Rule, ...]
    catalogs: Mapping[str, Catalog]
    graph: CausalGraph
    job_states: JobStates
    documents: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)
    _by_source: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict, repr=False)
    _sets: Mapping[str, Any] = field(default_factory=dict, repr=False)
    _prefilters: Mapping[str, Prefilter] = field(default_factory=dict, repr=False)

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

    def kind(self, name: str) -> KindSpec:
        return self.kinds[name]

    def document(self, type_: str) -> list[tuple[str, Any]]:
        """Raw validated documents of types the engine does not interpret (drain policy, metric rules)."""
        return list(self.documents.get(type_, ()))


# -- loading ----------------------------------------------------------------------------------------------


def default_rules_dir() -> Path:
    """The rule pack shipped with the project (rules/ of the checkout, or the installed copy)."""
    from attribution.resources import rules_dir

    return rules_dir()




def load_rules(directory: Path | str | None = None) -> RuleSet:
    """Load and validate a rule pack. Raises RulePackError listing every problem."""
    # imported here: a node agent with the pack compiled in its cache (rulepack/cache.py) never loads them
    import jsonschema
    import yaml

    #: libyaml's parser when PyYAML was built with it (the wheels are): the rule pack loads ~10x faster.
    _SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    root = Path(directory) if directory else default_rules_dir()
    problems: list[str] = []
    if not root.is_dir():
        raise RulePackError([f"{root}: not a directory"])
    files = sorted(p for p in root.rglob("*.yaml") if SCHEMA_DIR_NAME not in p.relative_to(root).parts)
    if not files:
        raise RulePackError([f"{root}: no .yaml files"])
    schemas = _load_schemas(root, problems)
    digest = hashlib.sha256()
    docs: dict[str, list[tuple[str, Any, Any]]] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        raw = path.read_bytes()
        digest.update(rel.encode() + b"\0" + raw + b"\0")
        shown = str(path)
        try:
            text = raw.decode("utf-8")
            tree = yaml.compose(text, Loader=_SAFE_LOADER)  # the node tree: line numbers for problems
            data = yaml.load(text, Loader=_SAFE_LOADER)
        except UnicodeDecodeError:
            problems.append(f"{shown}:1: not UTF-8 text")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else 1
            problems.append(f"{shown}:{line}: malformed YAML: {getattr(exc, 'problem', exc)}")
            continue
        if not isinstance(data, dict) or "type" not in data:
            problems.append(f"{shown}:1: expected a mapping with a 'type' key ({', '.join(FILE_TYPES)})")
            continue
        ftype = data["type"]
        if ftype not in FILE_TYPES:
            problems.append(f"{shown}:{_line(tree, ['type'])}: unknown type {ftype!r}")
            continue
        schema = schemas.get(ftype)
        if schema is not None:
            validator = jsonschema.Draft202012Validator(schema)
            errs = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
            if errs:
                for e in errs:
                    where = _line(tree, list(e.absolute_path))
                    at = "/".join(map(str, e.absolute_path)) or "(top)"
                    problems.append(f"{shown}:{where}: {at}: {_short(e.message)}")
                continue
        docs.setdefault(ftype, []).append((shown, data, tree))
    rs = _build(root, digest.hexdigest(), docs, problems)
    if problems:
        raise RulePackError(problems)
    assert rs is not None
    return rs


def _short(msg: str) -> str:
    return msg if len(msg) < 300 else msg[:297] + "..."


def _load_schemas(root: Path, problems: list[str]) -> dict[str, Any]:
    out = {}
    sdir = root / SCHEMA_DIR_NAME
    fallback = default_rules_dir() / SCHEMA_DIR_NAME
    for ftype, name in FILE_TYPES.items():
        p = sdir / name if (sdir / name).is_file() else fallback / name
        if not p.is_file():
            continue
        try:
            out[ftype] = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{p}:1: unreadable schema: {exc}")
    return out


def _line(tree, path: list) -> int:
    """1-based line of the YAML node at `path` (keys and indexes), or of its nearest existing parent."""
    import yaml

    node = tree
    line = (tree.start_mark.line + 1) if tree is not None else 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                return line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _prefilter_of(pattern: str) -> str:
    """A rule pattern turned into a scan pattern for raw lines: message anchors and capture names dropped."""
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    p = re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", p)
    return p


def _expand_codes(entry: dict) -> list[int]:
    if "code" in entry:
        return [int(entry["code"])]
    out: list[int] = []
    for c in entry.get("codes", []):
        if isinstance(c, int):
            out.append(c)
        else:
            a, b = (int(x) for x in str(c).split("-"))
            out.extend(range(a, b + 1))
    return out


def _build(root: Path, version: str, docs: dict, problems: list[str]) -> RuleSet | None:
    # kinds
    kinds: dict[str, KindSpec] = {}
    for shown, data, tree in docs.get("kinds", []):
        for name, spec in data["kinds"].items():
            if name in kinds:
                problems.append(f"{shown}:{_line(tree, ['kinds', name])}: kind {name!r} defined twice")
                continue
            kinds[name] = KindSpec(name=name, role=spec["role"], summary=spec["summary"],
                                   outcome=spec.get("outcome"), action=spec.get("action"),
                                   severity=spec.get("severity", "info"),
                                   hint=MappingProxyType(dict(spec["hint"])) if spec.get("hint") else None)
    if not kinds:
        problems.append(f"{root}: no kinds file (type: kinds)")

    def need_kind(kind: str, shown: str, tree, path: list) -> None:
        if kind not in kinds:
            problems.append(f"{shown}:{_line(tree, path)}: unknown kind {kind!r} (not in the kinds file)")

    # catalogs
    catalogs: dict[str, Catalog] = {}
    for shown, data, tree in docs.get("catalog", []):
        name = data["name"]
        if name in catalogs:
            problems.append(f"{shown}:{_line(tree, ['name'])}: catalog {name!r} defined twice")
            continue
        sets = data.get("variant_sets", {})
        entries: dict[int, CatalogEntry] = {}

        def variants_of(e: dict, path: list) -> tuple[Variant, ...]:
            variants = e.get("variants", ())
            vpath = path + ["variants"]
            if isinstance(variants, str):
                if variants not in sets:
                    problems.append(f"{shown}:{_line(tree, vpath)}: unknown variant set {variants!r}")
                    return ()
                vpath = ["variant_sets", variants]
                variants = sets[variants]
            built = []
            for j, v in enumerate(variants):
                need_kind(v["kind"], shown, tree, vpath + [j, "kind"])
                when = []
                for fname, rx in v["when"].items():
                    when.append((fname, _compile_checked(rx, shown, tree, vpath + [j, "when", fname], problems)))
                built.append(Variant(tuple(when), v["kind"], v.get("action"), v.get("severity")))
            return tuple(built)

        for i, e in enumerate(data["entries"]):
            path = ["entries", i]
            need_kind(e["kind"], shown, tree, path + ["kind"])
            built_variants = variants_of(e, path)
            fields = []
            for fname, rx in (e.get("fields") or {}).items():
                fields.append((fname, _compile_checked(rx, shown, tree, path + ["fields", fname], problems)))
            for code in _expand_codes(e):
                if code in entries:
                    problems.append(f"{shown}:{_line(tree, path)}: code {code} listed twice in catalog {name!r}")
                entries[code] = CatalogEntry(code=code, kind=e["kind"], action=e.get("action"),
                                             severity=e.get("severity"), mnemonic=e.get("mnemonic"),
                                             description=e.get("description"), variants=built_variants,
                                             fields=tuple(fields))
        default = None
        if data.get("default"):
            d = data["default"]
            need_kind(d["kind"], shown, tree, ["default", "kind"])
            default = CatalogEntry(code=-1, kind=d["kind"], action=d.get("action"), severity=d.get("severity"),
                                   variants=variants_of(d, ["default"]))
        catalogs[name] = Catalog(name, MappingProxyType(entries), default,
                                 MappingProxyType(dict(data["provenance"])))

    # rules
    rules: list[Rule] = []
    seen_ids: dict[str, str] = {}
    for shown, data, tree in docs.get("rules", []):
        for i, r in enumerate(data["rules"]):
            path = ["rules", i]
            line = _line(tree, path)
            rid = r["id"]
            if rid in seen_ids:
                problems.append(f"{shown}:{line}: rule id {rid!r} already used at {seen_ids[rid]}")
                continue
            seen_ids[rid] = f"{shown}:{line}"
            pattern = r["pattern"]
            if "^" in pattern[1:].replace("[^", "").replace("\\^", ""):
                problems.append(f"{shown}:{_line(tree, path + ['pattern'])}: '^' may only anchor the start of a "
                                f"pattern (it matches the start of the message, after the prefix)")
            rx = _compile_checked(pattern, shown, tree, path + ["pattern"], problems)
            pre = r.get("prefilter") or _prefilter_of(pattern)
            _compile_checked(pre, shown, tree, path + ["prefilter" if "prefilter" in r else "pattern"], problems)
            if "kind" in r:
                need_kind(r["kind"], shown, tree, path + ["kind"])
            if "catalog" in r and r["catalog"] not in catalogs:
                problems.append(f"{shown}:{_line(tree, path + ['catalog'])}: unknown catalog {r['catalog']!r}")
            for k in r.get("unless_kinds", []):
                need_kind(k, shown, tree, path + ["unless_kinds"])
            if rx is not None and "catalog" in r and "code" not in rx.groupindex and "code" not in r:
                problems.append(f"{shown}:{_line(tree, path + ['pattern'])}: a catalog rule must capture (?P<code>...)")
            examples = tuple(Example(line=ex["line"], source=ex.get("source", r["source"]),
                                     expect=MappingProxyType(dict(ex.get("expect") or {})), ref=ex.get("ref"))
                             for ex in r["examples"]["match"])
            sources = (r["source"],) + tuple(s for s in r.get("also_sources", []) if s != r["source"])
            rules.append(Rule(
                id=rid, source=r["source"], sources=sources, pattern=pattern, regex=rx, prefilter=pre,
                kind=r.get("kind"), catalog=r.get("catalog"), code=r.get("code"), role=r.get("role"),
                action=r.get("action"), severity=r.get("severity"),
                require_flags=frozenset(r.get("require_flags", [])),
                unless_kinds=frozenset(r.get("unless_kinds", [])),
                unless_flags=frozenset(r.get("unless_flags", [])),
                set_fields=tuple(sorted((r.get("set_fields") or {}).items())),
                examples=examples, no_match=tuple(r["examples"].get("no_match", [])),
                path=shown, line=line))

    # causal graph
    graph = CausalGraph(edges=())
    graphs = docs.get("causal_graph", [])
    if len(graphs) != 1:
        problems.append(f"{root}: expected exactly one causal graph file (type: causal_graph), found {len(graphs)}")
    else:
        shown, data, tree = graphs[0]
        edges = []
        for i, e in enumerate(data["edges"]):
            for side in ("causes", "explains"):
                for j, k in enumerate(e[side].get("kinds", [])):
                    need_kind(k, shown, tree, ["edges", i, side, "kinds", j])
            edges.append(Edge(id=e["id"], causes=_selector(e["causes"]), explains=_selector(e["explains"]),
                              locality=e["locality"], within_seconds=e.get("within_seconds"),
                              link_fields=tuple((a, b) for a, b in e.get("link_fields", []))))
        w = data.get("window", {})
        graph = CausalGraph(edges=tuple(edges), before_start_seconds=w.get("before_start_seconds", 300),
                            after_end_seconds=w.get("after_end_seconds", 300),
                            clock_skew_seconds=data.get("clock_skew_seconds", 0))

    # job states
    js = docs.get("job_states", [])
    job_states = JobStates(MappingProxyType({}), StateDecision("unknown", "investigate", "low"))
    if len(js) != 1:
        problems.append(f"{root}: expected exactly one job states file (type: job_states), found {len(js)}")
    else:
        data = js[0][1]
        job_states = JobStates(
            MappingProxyType({k.upper(): _decision(v) for k, v in data["states"].items()}),
            _decision(data["failed"]))

    # metric rules (interpreted by attribution.extract.metrics): their kinds, catalogs and ids
    for shown, data, tree in docs.get("metric_rules", []):
        for i, r in enumerate(data["rules"]):
            path = ["rules", i]
            rid = r["id"]
            if rid in seen_ids:
                problems.append(f"{shown}:{_line(tree, path)}: rule id {rid!r} already used at {seen_ids[rid]}")
            seen_ids.setdefault(rid, f"{shown}:{_line(tree, path)}")
            if "kind" in r:
                need_kind(r["kind"], shown, tree, path + ["kind"])
            if "catalog" in r and r["catalog"] not in catalogs:
                problems.append(f"{shown}:{_line(tree, path + ['catalog'])}: unknown catalog {r['catalog']!r}")
            if "min_increase" in r and r["trigger"] != "increase":
                problems.append(f"{shown}:{_line(tree, path + ['min_increase'])}: min_increase needs trigger "
                                f"'increase'")
            for j, ex in enumerate(r["examples"]):
                for k, exp in enumerate(ex["expect"]):
                    if "kind" in exp:
                        need_kind(exp["kind"], shown, tree, path + ["examples", j, "expect", k, "kind"])

    # counter rules (interpreted by attribution.extract.counters): their kinds and ids
    for shown, data, tree in docs.get("counter_rules", []):
        for i, r in enumerate(data["rules"]):
            path = ["rules", i]
            rid = r["id"]
            if rid in seen_ids:
                problems.append(f"{shown}:{_line(tree, path)}: rule id {rid!r} already used at {seen_ids[rid]}")
            seen_ids.setdefault(rid, f"{shown}:{_line(tree, path)}")
            need_kind(r["kind"], shown, tree, path + ["kind"])
            if "min_increase" in r and r["trigger"] != "increase":
                problems.append(f"{shown}:{_line(tree, path + ['min_increase'])}: min_increase needs trigger "
                                f"'increase'")
            if "where" in r and r["device"] != "pci":
                problems.append(f"{shown}:{_line(tree, path + ['where'])}: 'where' applies to device 'pci' only")
            for j, ex in enumerate(r["examples"]):
                for k, exp in enumerate(ex["expect"]):
                    if "kind" in exp:
                        need_kind(exp["kind"], shown, tree, path + ["examples", j, "expect", k, "kind"])

    if problems:
        return None

    by_source: dict[str, list[Rule]] = {}
    for r in rules:
        for s in r.sources:
            by_source.setdefault(s, []).append(r)
    sets = {}
    prefilters = {}
    for source, rs in by_source.items():
        s = re2.Set.SearchSet(_options())
        for r in rs:
            s.Add(r.pattern)
        s.Compile()
        sets[source] = s
        prefilters[source] = Prefilter(r.prefilter for r in rs)
    other_docs = {t: tuple((shown, data) for shown, data, _ in v) for t, v in docs.items()
                  if t in ("drain_policy", "metric_rules", "counter_rules")}
    return RuleSet(
        root=str(root), version=version, kinds=MappingProxyType(kinds), rules=tuple(rules),
        catalogs=MappingProxyType(catalogs), graph=graph, job_states=job_states,
        documents=MappingProxyType(other_docs),
        _by_source=MappingProxyType({k: tuple(v) for k, v in by_source.items()}),
        _sets=MappingProxyType(sets), _prefilters=MappingProxyType(prefilters))


def _selector(d: dict) -> Selector:
    return Selector(kinds=frozenset(d.get("kinds", [])), outcomes=frozenset(d.get("outcomes", [])),
                    roles=frozenset(d.get("roles", [])), sources=frozenset(d.get("sources", [])))


def _decision(d: dict) -> StateDecision:
    return StateDecision(outcome=d["outcome"], action=d["action"], confidence=d["confidence"],
                         culprit=d.get("culprit", "none"), final=bool(d.get("final", False)))


def _compile_checked(pattern: str, shown: str, tree, path: list, problems: list[str]):
    try:
        return compile_re2(pattern)
    except re2.error as exc:
        msg = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        problems.append(f"{shown}:{_line(tree, path)}: pattern rejected by RE2 (linear-time engine): {msg}")
        return None
