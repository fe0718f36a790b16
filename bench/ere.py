"""The rule pack's scan patterns in GNU grep's POSIX ERE dialect, so grep can do the same search as we do."""

from __future__ import annotations

import re

_REPLACE = [
    (r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "("),
    (r"\(\?:", "("),
    (r"\(\?i\)", ""),
    (r"\\d", "[0-9]"),
    (r"\\s", "[[:space:]]"),
    (r"\\S", "[^[:space:]]"),
    (r"\\w", "[[:alnum:]_]"),
    (r"\+\?", "+"),
    (r"\*\?", "*"),
]


def to_ere(pattern: str) -> str:
    """Translate the RE2 features the rules use into ERE (inside bracket expressions too: [\\w.-] -> [[:alnum:]_.-])."""
    p = pattern
    p = re.sub(r"\[([^\]]*)\]", lambda m: "[" + m.group(1).replace("\\w", "[:alnum:]_").replace("\\d", "0-9")
               .replace("\\s", "[:space:]").replace("\\.", ".").replace("\\-", "-") + "]", p)
    for a, b in _REPLACE:
        p = re.sub(a, b, p)
    return p


def rule_patterns(ruleset, sources) -> list[str]:
    seen = []
    for source in sources:
        for r in ruleset.rules_for(source):
            e = to_ere(r.prefilter)
            if e not in seen:
                seen.append(e)
    seen.append(r"Traceback \(most recent call last\)")
    return seen
