"""Checking a rule pack (`attribution rules check`): schema and semantics (rulepack) plus every rule's own examples
and the hook filter.

Each rule carries real lines it must match (with the fields it must produce) and near-misses it must not; so does
each redaction pattern (the span it must redact, the lines it must leave alone).
The examples go through the same collector parsing and prefilter as real logs, so a prefix the parser does
not understand, or a prefilter that misses the line, is caught here too. Every problem is a `Problem`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attribution.collect.joboutput import parse_job_text
from attribution.collect.nodelogs import NodeLogSpec, parse_node_text
from attribution.errors import Problem, RulePackError
from attribution.extract.events import extract, normalize_gpu
from attribution.model import Event, ExecutionContext, Observation
from attribution.rulepack import hookfilter
from attribution.rulepack.load import load_rules
from attribution.rulepack.prefilter import Prefilter
from attribution.rulepack.values import IgnoreRule, Rule, RuleSet

EXAMPLE_NODES = ("node0", "node1", "node2", "node3")


def example_context() -> ExecutionContext:
    return ExecutionContext(cluster="example", job_id="0", nodes=EXAMPLE_NODES, tasks_per_node=8)


def observations_for_line(source: str, text: str, prefilter: Prefilter) -> list[Observation]:
    """The observations a collector of `source` makes of one example (one line, or a multi-line record), with
    the lines `prefilter` selects."""
    ctx = example_context()
    if source == "job":
        return parse_job_text(text + "\n", "example", ctx, prefilter)
    if source == "scheduler":
        return [Observation(source="scheduler", node=None, location="example:1", text=text, line=text)]
    return parse_node_text(text + "\n", NodeLogSpec(source, "node0", "example"), ctx, prefilter)


def events_for_line(ruleset: RuleSet, source: str, text: str) -> list[Event]:
    """What the whole rule set makes of one example (one line, or a multi-line record) of `source`."""
    return extract(ruleset, example_context(), observations_for_line(source, text, ruleset.prefilter(source)))


def _value_matches(ev: Event, key: str, want: Any) -> bool:
    if key == "gpu":
        return ev.gpu == normalize_gpu(str(want)) if want is not None else ev.gpu is None
    if key == "fields":
        return all(str(ev.fields.get(k)) == str(v) for k, v in (want or {}).items())
    have = getattr(ev, key, None)
    if key == "time":
        return (have.isoformat() if have else None) == want
    return have == want


def check_examples(ruleset: RuleSet) -> list[Problem]:
    problems: list[Problem] = []
    for rule in ruleset.rules:
        problems.extend(_check_rule(ruleset, rule))
    for ignore in ruleset.ignores:
        problems.extend(check_ignore(ruleset, ignore))
    return problems


#: Selects every line: what an ignore entry's near-miss makes, error-looking or not.
_EVERY_LINE = Prefilter([r"\S"])


def check_ignore(ruleset: RuleSet, ig: IgnoreRule) -> list[Problem]:
    """An ignore entry's examples: each is error-looking (else there is nothing to ignore), its message matches
    the entry and no rule of its source (a line a rule reads is not ignored); no near-miss matches it."""
    from attribution.replay.keep import pack_errorlike

    out = []
    errorlike = pack_errorlike(ruleset)
    for ex in ig.examples:
        obs = observations_for_line(ex.source, ex.line, errorlike)
        if not obs:
            out.append(Problem(ig.path, ig.line, f"ignore {ig.id}: example is not error-looking (rules/replay/"
                                                 f"error-lines.txt), nothing to ignore: {ex.line[:120]!r}"))
            continue
        for o in obs:
            if not ig.regex.search(o.text):
                out.append(Problem(ig.path, ig.line, f"ignore {ig.id}: example does not match: {o.text[:160]!r}"))
            rules = ruleset.matching(o.source, o.text)
            if rules:
                out.append(Problem(ig.path, ig.line, f"ignore {ig.id}: rule {rules[0].id} matches its example, "
                                                     f"which is not ignored then: {o.text[:120]!r}"))
    for line in ig.no_match:
        if any(ig.regex.search(o.text) for o in observations_for_line(ig.source, line, _EVERY_LINE)):
            out.append(Problem(ig.path, ig.line, f"ignore {ig.id}: near-miss matches but must not: {line[:160]!r}"))
    return out


def _check_rule(ruleset: RuleSet, rule: Rule) -> list[Problem]:
    out = []
    for ex in rule.examples:
        evs = [e for e in events_for_line(ruleset, ex.source, ex.line) if e.rule == rule.id]
        if not evs:
            out.append(Problem(rule.path, rule.line, f"rule {rule.id}: example does not match: {ex.line[:160]!r}"))
            continue
        ok = any(all(_value_matches(e, k, v) for k, v in ex.expect.items()) for e in evs)
        if not ok:
            got = {k: (getattr(evs[0], k, None) if k != "fields" else dict(evs[0].fields)) for k in ex.expect}
            out.append(Problem(rule.path, rule.line, f"rule {rule.id}: example gives {got}, expected "
                                                     f"{dict(ex.expect)}: {ex.line[:120]!r}"))
    for line in rule.no_match:
        evs = [e for e in events_for_line(ruleset, rule.source, line) if e.rule == rule.id]
        if evs:
            out.append(Problem(rule.path, rule.line, f"rule {rule.id}: near-miss matches but must not: {line[:160]!r}"))
    return out


def check_pack(directory: Path | None, hook_filter: Path | None = None) -> tuple[list[Problem], str]:
    """All problems of a pack (empty when it is good) and a one-line summary. `hook_filter`: the node hook's
    filter file to compare with the pack's (default: hooks/suspicious.patterns beside the pack, if there is one)."""
    try:
        rs = load_rules(directory)
    except RulePackError as exc:
        return exc.problems, ""
    from attribution.drain.policy import policy_problems
    from attribution.extract.metrics import check_examples as check_metric_examples

    from attribution.extract.counters import check_examples as counter_examples, counter_rules

    from attribution.extract import redact

    from attribution.act.requeue import policy_problems as requeue_problems

    problems = check_examples(rs) + (policy_problems(rs) if rs.document("drain_policy") else [])
    problems += requeue_problems(rs)
    problems += redact.check_examples(rs)
    problems += counter_examples(rs, example_context())
    problems += hookfilter.rule_problems(rs)
    filter_path = hook_filter or hookfilter.default_filter_path(Path(rs.root))
    if filter_path is not None:
        problems += hookfilter.file_problems(rs, filter_path)
        lines_path = filter_path.parent / hookfilter.ERROR_LINES_BESIDE_PACK.name  # the hooks' folder's
        if lines_path.is_file():
            problems += hookfilter.error_lines_problems(rs, lines_path)
    if not problems:  # the metric rules' examples (rules/metrics.yaml) run through their own engine
        problems = check_metric_examples(rs, example_context())
    n_ex = sum(len(r.examples) + len(r.no_match) for r in rs.rules)
    n_ex += sum(len(r.examples) + len(r.no_match) for r in rs.ignores)
    n_ex += sum(len(r.examples) for r in counter_rules(rs)) + redact.example_count(rs)
    summary = (f"{rs.root}: {len(rs.rules)} rules, {len(rs.ignores)} ignored line patterns, {len(rs.kinds)} kinds, "
               f"{sum(len(c.entries) for c in rs.catalogs.values())} catalog codes, "
               f"{len(rs.graph.edges)} causal edges, {len(rs.redactions.patterns)} redactions, {n_ex} examples: ok (version {rs.version[:12]})")
    return problems, summary
