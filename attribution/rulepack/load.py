"""Loading a rule pack: YAML files validated once, at the boundary, into a frozen RuleSet.

Every problem is reported as a `Problem(path, line, message)` (schema violations, bad regexes, unknown kinds,
duplicate ids, dangling catalog references), all of them at once in one RulePackError. The engine (extract,
correlate) never re-checks what this module accepted. Reading is `yamlload`, building the values `builders`,
the values themselves `values`, the line prefilter `prefilter`.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from attribution.errors import Problem, RulePackError
from attribution.rulepack.builders import BUILDERS, Building
from attribution.rulepack.errorlines import error_line_patterns, informational_line_patterns
from attribution.rulepack.prefilter import Prefilter, compile_re2, search_set
from attribution.rulepack.values import Rule, RuleSet
from attribution.rulepack.yamlload import FILE_TYPES, SCHEMA_DIR_NAME, pack_files, read_pack

__all__ = ["load_rules", "default_rules_dir", "compile_re2", "FILE_TYPES", "Rule", "RuleSet"]

def default_rules_dir() -> Path:
    """The rule pack shipped with the project (rules/ of the checkout, or the installed copy)."""
    from attribution.resources import rules_dir

    return rules_dir()


def load_rules(directory: Path | str | None = None) -> RuleSet:
    """Load and validate a rule pack. Raises RulePackError listing every problem."""
    root = Path(directory) if directory else default_rules_dir()
    if not root.is_dir():
        raise RulePackError([Problem(str(root), None, "not a directory")])
    if not pack_files(root):
        raise RulePackError([Problem(str(root), None, "no .yaml files")])
    problems: list[Problem] = []
    version, docs = read_pack(root, default_rules_dir() / SCHEMA_DIR_NAME, problems)
    b = Building(root=root, problems=problems)
    for ftype, build in BUILDERS.items():
        build(b, docs.get(ftype, []))
    if problems:
        raise RulePackError(problems)
    by_source: dict[str, list[Rule]] = {}
    for r in b.rules:
        for s in r.sources:
            by_source.setdefault(s, []).append(r)
    return RuleSet(
        root=str(root), version=version, kinds=MappingProxyType(b.kinds), rules=tuple(b.rules),
        catalogs=MappingProxyType(b.catalogs), graph=b.graph, job_states=b.job_states,
        metric_rules=tuple(b.metric_rules), drain_policy=b.drain_policy, redactions=b.redactions,
        documents=MappingProxyType({t: tuple((d.shown, d.data) for d in v) for t, v in docs.items()
                                    if t in ("drain_policy", "requeue_policy", "metric_rules", "counter_rules")}),
        _by_source=MappingProxyType({k: tuple(v) for k, v in by_source.items()}),
        _sets=MappingProxyType({k: search_set(r.pattern for r in v) for k, v in by_source.items()}),
        _prefilters=MappingProxyType({k: Prefilter(r.prefilter for r in v) for k, v in by_source.items()}),
        errorlike=Prefilter(error_line_patterns(root), informational_line_patterns(root)),
        ignores=tuple(b.ignores))
