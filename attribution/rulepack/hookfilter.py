"""The node hook's cheap filter, generated from the pack: the fixed strings of every node-side rule.

The Slurm epilog greps this node's kernel and Fabric Manager logs with `grep -F -f hooks/suspicious.patterns`
before it starts Python; a job that exited 0 with no line matching the filter is not looked at. So every line a
node-side rule can match must contain one of the filter's strings, or its fault is silently lost. Each such rule
names its strings (`hook_filter:`); `attribution rules filter` writes the file from them, and `rules check`
fails when a rule's example misses its own strings or the file on disk is not what the pack generates.
"""

from __future__ import annotations

from pathlib import Path

from attribution.errors import Problem
from attribution.rulepack.values import Rule, RuleSet

#: The sources the hook filters (its kernel log and Fabric Manager log; `node` is journald's other units).
HOOK_SOURCES = frozenset({"kernel", "fabricmanager", "node"})
#: Where the hooks read the filter, relative to the directory holding the rule pack (the repository layout).
FILTER_BESIDE_PACK = Path("hooks") / "suspicious.patterns"


def node_side(rule: Rule) -> bool:
    return bool(set(rule.sources) & HOOK_SOURCES)


def hook_looks_for(ruleset: RuleSet, rule: Rule) -> bool:
    """A node-side rule whose lines make a job worth a look. Not one of a kind that marks the node's life (a boot,
    `life:` in rules/kinds.yaml): no fault, and the hook's report carries the node's boot time anyway."""
    spec = ruleset.kinds.get(rule.kind) if rule.kind else None
    return node_side(rule) and not (spec is not None and spec.life)


def hook_filter(ruleset: RuleSet) -> list[str]:
    """The filter's lines: every node-side rule's strings, each once, in the pack's order."""
    out: dict[str, None] = {}
    for rule in ruleset.rules:
        if hook_looks_for(ruleset, rule):
            out.update(dict.fromkeys(rule.hook_filter))
    return list(out)


def filter_text(ruleset: RuleSet) -> str:
    return "".join(f"{s}\n" for s in hook_filter(ruleset))


def rule_problems(ruleset: RuleSet) -> list[Problem]:
    """Node-side rules without filter strings, and node examples their own strings miss."""
    out = []
    for rule in ruleset.rules:
        if not hook_looks_for(ruleset, rule):
            continue
        if not rule.hook_filter:
            out.append(Problem(rule.path, rule.line, f"rule {rule.id}: a rule of a node source needs hook_filter "
                                                     f"(the fixed strings the node hook greps for)"))
            continue
        for ex in rule.examples:
            if ex.source in HOOK_SOURCES and not any(s in ex.line for s in rule.hook_filter):
                out.append(Problem(rule.path, rule.line, f"rule {rule.id}: example holds none of its hook_filter "
                                                         f"strings, the node hook would skip it: {ex.line[:120]!r}"))
    return out


def file_problems(ruleset: RuleSet, path: Path) -> list[Problem]:
    """Where the filter file on disk differs from the one the pack generates (each side, with its line)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(str(path), None, f"unreadable hook filter: {exc}")]
    have = set(lines)
    want = hook_filter(ruleset)
    out = []
    for rule in ruleset.rules:
        if hook_looks_for(ruleset, rule):
            for s in rule.hook_filter:
                if s not in have:
                    out.append(Problem(rule.path, rule.line, f"rule {rule.id}: the hook filter {path} lacks {s!r}, "
                                                             f"so the node hook would skip this rule's lines "
                                                             f"(regenerate it: attribution rules filter > {path})"))
    wanted = set(want)
    for no, line in enumerate(lines, 1):
        if line not in wanted:
            out.append(Problem(str(path), no, f"{line!r} is no node rule's hook_filter string "
                                              f"(regenerate: attribution rules filter > {path})"))
    return out


def default_filter_path(pack: Path) -> Path | None:
    """The repository's hook filter beside a pack (rules/ and hooks/ side by side), when there is one."""
    cand = Path(pack).resolve().parent / FILTER_BESIDE_PACK
    return cand if cand.is_file() else None


#: The error-looking lines' patterns the node collector keeps for replay, beside the filter (docs/replay.md).
ERROR_LINES_BESIDE_PACK = Path("hooks") / "error-lines.patterns"


def error_lines_text(ruleset: RuleSet) -> str:
    """hooks/error-lines.patterns: the pack's error-looking patterns (replay/error-lines.txt), one a line, its
    informational ones as `!pattern` lines, and `=string` lines: lower-case strings of which every match of the
    patterns holds one (rulepack/literals.py; none when a pattern has no such strings), so that the node tries the
    patterns only on the lines holding one; each pattern's line ends with its own such strings after tabs
    (`PATTERN<TAB>=s1<TAB>=s2`), so that a line is tried only with the patterns of the strings it holds. No comments: what the node collector reads with Python's `re` (a
    pattern only RE2 takes is left out here; the centre's keeper still applies it to what arrives)."""
    import re

    from attribution.rulepack.errorlines import error_line_patterns, informational_line_patterns
    from attribution.rulepack.literals import required_strings, strings_of_each

    found, informational = [], []
    for into, patterns in ((found, error_line_patterns(ruleset.root)), (informational,
                                                                        informational_line_patterns(ruleset.root))):
        for p in patterns:
            body = p[len("(?i:"):-1]  # the file's pattern, as written
            try:
                re.compile(body)
            except re.error:
                continue
            if "\t" not in body:  # a tab separates a pattern from its strings (below)
                into.append(body)
    strings = required_strings(found) if found else None
    each = strings_of_each(found) if strings else None
    # a pattern's line names, after a tab, the strings one of which each of its matches holds: the node tries
    # it only on the lines holding one of them (~4x faster than the patterns together on every such line)
    out = [body + ("\t" + "\t".join(f"={s}" for s in sorted(mine)) if each else "")
           for body, mine in zip(found, each or [()] * len(found))]
    out += [f"!{body}" for body in informational]
    out += [f"={s}" for s in sorted(strings or ())]
    return "".join(f"{s}\n" for s in out)


def error_lines_problems(ruleset: RuleSet, path: Path) -> list[Problem]:
    """Where hooks/error-lines.patterns differs from what the pack generates."""
    try:
        have = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(str(path), None, f"unreadable error-line patterns: {exc}")]
    if have == error_lines_text(ruleset):
        return []
    return [Problem(str(path), None, f"not what the pack's replay/error-lines.txt generates (regenerate it: "
                                     f"attribution rules filter --error-lines > {path})")]

