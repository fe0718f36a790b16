"""The fixed strings a regular expression's every match contains: one of a set, found from the pattern's parse.

The node collector keeps the error-looking lines of logs of tens of megabytes (hooks/error-lines.patterns); a
case-insensitive alternation of twenty patterns runs at ~5 MB/s in Python's `re`, a search for fixed strings
in the lower-cased bytes at hundreds. So the generated file also gives, for the patterns together, strings of
which every match holds one: the node tries the patterns only on the lines holding one of them. Pure.
"""

from __future__ import annotations

try:  # Python 3.11+
    from re import _constants as C, _parser as P  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - 3.9, 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

#: A set whose shortest string is shorter than this finds too many lines to be worth it
MIN_CHARS = 3


def _best(cands: list[frozenset[str]]) -> frozenset[str] | None:
    good = [c for c in cands if c]
    if not good:
        return None
    return max(good, key=lambda c: (min(len(s) for s in c), -len(c)))


def _lead(items) -> str:
    """The literal characters a sequence starts with (lower case), across anchors."""
    out = []
    for op, av in items:
        if op is C.LITERAL:
            out.append(chr(av).lower())
        elif op is not C.AT:
            break
    return "".join(out)


def _required(items) -> frozenset[str] | None:
    """Strings of which every match of the parsed sequence `items` holds one (lower case), or None."""
    cands: list[frozenset[str]] = []
    run: list[str] = []

    def end_run() -> None:
        if run:
            cands.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is C.LITERAL:
            run.append(chr(av).lower())
            continue
        if op is C.AT:  # \b, ^, $: they match no character, the run goes on
            continue
        if op is C.BRANCH and run:  # the parser moved the alternatives' common start before them: join it back
            cands.append(frozenset("".join(run) + _lead(alt) for alt in av[1]))
        end_run()
        if op is C.SUBPATTERN:
            got = _required(av[-1])
        elif op is C.BRANCH:
            parts = [_required(alt) for alt in av[1]]
            got = None if any(p is None for p in parts) else frozenset().union(*parts)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
            got = _required(av[2])
        else:
            got = None
        if got is not None:
            cands.append(got)
    end_run()
    return _best(cands)


def _each_required(patterns: list[str]) -> list[frozenset[str]] | None:
    out = []
    for p in patterns:
        try:
            got = _required(P.parse(p))
        except Exception:  # a pattern Python's parser does not take: no strings for it
            return None
        if got is None or min(len(s) for s in got) < MIN_CHARS:
            return None
        out.append(got)
    return out


def required_strings(patterns: list[str]) -> frozenset[str] | None:
    """Lower-case strings of which every case-insensitive match of any of `patterns` holds one, or None when
    one of them gives none (or only strings shorter than MIN_CHARS): then only the patterns can find the lines."""
    each = _each_required(patterns)
    if each is None:
        return None
    out: set[str] = set().union(*each)
    # a string that holds another is found by the other: keep the shortest
    return frozenset(s for s in out if not any(t != s and t in s for t in out))


def strings_of_each(patterns: list[str]) -> list[frozenset[str]] | None:
    """For each pattern, the strings of required_strings(patterns) of which every match of that pattern holds
    one (a string the pattern needs, or one such a string holds), or None when required_strings gives none: a
    line holding none of a pattern's strings cannot match it, so the node tries on a line only the patterns of
    the strings it holds."""
    each = _each_required(patterns)
    final = required_strings(patterns) if each is not None else None
    if each is None or final is None:
        return None
    return [frozenset(f for f in final if any(f in r for r in got)) for got in each]
