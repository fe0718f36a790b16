"""rulepack.literals: strings of which every match of a pattern holds one, from the pattern's parse."""

from __future__ import annotations

import re

import pytest

from attribution.rulepack.literals import required_strings


@pytest.mark.parametrize("pattern, strings", [
    (r"\bfail(s|ed|ure|ing)?\b", {"fail"}),
    (r"\bout of memory\b|\boom\b", {"out of memory", "oom"}),  # the parser's common "o" joined back
    (r"\bsegfault\b|\bsegmentation fault\b", {"segfault", "segmentation fault"}),
    (r"^Traceback \(most recent call last\)", {"traceback (most recent call last)"}),
    (r"\bhung\b|\bhang(s|ing)?\b|\bstall(ed)?\b", {"hung", "hang", "stall"}),
    (r"NCCL (WARN|ERROR) x", {"nccl "}),
])
def test_each_pattern_gives_the_strings_every_match_holds(pattern, strings):
    assert required_strings([pattern]) == strings


@pytest.mark.parametrize("pattern", [r"\b\w+ed\b", r"(?:fail)?ur", r"[a-z]{4}", r"ab|cd", r"(?P<x"])
def test_a_pattern_without_such_strings_gives_none(pattern):
    """No literal (a class), an optional one, strings shorter than three characters, a pattern `re` refuses."""
    assert required_strings([pattern]) is None


def test_one_pattern_without_strings_gives_none_for_all_and_a_longer_string_yields_to_a_shorter():
    assert required_strings([r"\berror\b", r"\w+ed"]) is None
    assert required_strings([r"\berror\b", r"\berr(no)?\b"]) == {"err"}


def test_every_match_holds_one_of_the_strings():
    patterns = [r"\btime[d ]?out\b|\btimed out\b", r"\bcannot\b|\bcan't\b|\bunable to\b"]
    strings = required_strings(patterns)
    lines = ["Timed Out waiting", "connection timeout", "time out", "CANNOT open", "can't do", "Unable To x",
             "timeless", "cant", "unable"]
    for line in lines:
        if any(re.search(p, line, re.IGNORECASE) for p in patterns):
            assert any(s in line.lower() for s in strings), line


def test_each_pattern_gets_the_strings_of_the_set_that_its_matches_hold():
    """strings_of_each: `error` yields to `err` in the set, so the pattern of `error` is tried on lines holding
    `err`; a pattern is given only strings its own matches hold."""
    from attribution.rulepack.literals import strings_of_each

    patterns = [r"\berror(s)?\b", r"\berr(no)?\b", r"\bhung\b|\bhang(s|ing)?\b", r"\bfatal\b"]
    assert strings_of_each(patterns) == [{"err"}, {"err"}, {"hung", "hang"}, {"fatal"}]
    assert strings_of_each([r"\berror\b", r"\w+ed"]) is None
