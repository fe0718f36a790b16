"""Redaction: the secrets a line holds (passwords, tokens, cloud keys, private keys: rules/redactions.yaml)
replaced by `[redacted:KIND]` before the line is matched, kept or stored. Pure.

Every line passes here where it enters: extract (each observation's text and line, before any rule matches, so
an event's `line`, `message` and captured fields are redacted), the evidence kept for replay
(replay.keep.LineKeeper.feed) and the lines `rules suggest` shows. The patterns run in the pack's order, each on
what the earlier ones left; an already redacted span (`[redacted:...]`) is never redacted again, so redacting
twice gives what redacting once gave. See docs/security.md "Secrets in job output".
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Mapping

from attribution import frozen
from attribution.errors import Problem
from attribution.model import Event, Observation
from attribution.rulepack.values import Redactions, RuleSet


def entropy(text: str) -> float:
    """Shannon entropy of the characters of `text`, in bits per character."""
    n = len(text)
    if n == 0:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


#: At most this many matches of one pattern are looked at in one text (each costs the RE2 wrapper ~25 us): from
#: the next one on, the rest of the text is redacted whole. Only a text built to be slow (a 64 KiB record of
#: `password=x password=x ...`) has so many; it costs a bounded time and keeps no secret.
MAX_MATCHES = 100


def redact_counted(redactions: Redactions, text: str) -> tuple[str, dict[str, int]]:
    """`text` with every secret replaced by `[redacted:KIND]`, and how many of each kind were replaced."""
    counts: dict[str, int] = {}
    for p in redactions.candidates(text):
        out: list[str] = []
        at = n = 0
        for i, m in enumerate(p.regex.finditer(text)):
            if i == MAX_MATCHES:
                out += (text[at:m.start()], p.marker)
                at = len(text)
                n += 1
                break
            start, end = m.span(p.group)
            if start < 0 or end <= start:
                continue  # the secret group did not take part in this match
            if p.min_entropy and entropy(text[start:end]) < p.min_entropy:
                continue
            out += (text[at:start], p.marker)
            at = end
            n += 1
        if n:
            out.append(text[at:])
            text = "".join(out)
            counts[p.kind] = counts.get(p.kind, 0) + n
    return text, counts


def redact(redactions: Redactions, text: str) -> str:
    """`text` with every secret replaced by `[redacted:KIND]` (the same `text` object when it holds none)."""
    if redactions.matcher is None:
        return text
    return redact_counted(redactions, text)[0]


def redact_observation(ruleset: RuleSet, obs: Observation) -> Observation:
    """The observation with its text and its line redacted (the same object when neither holds a secret)."""
    red = ruleset.redactions
    if not red.any_in(obs.line, obs.text):  # nearly every observation: one set pass over both
        return obs
    text = redact_counted(red, obs.text)[0]
    line = text if obs.line == obs.text else redact_counted(red, obs.line)[0]
    if text == obs.text and line == obs.line:
        return obs
    return frozen.replace(obs, text=text, line=line)


def redact_event(ruleset: RuleSet, ev: Event) -> Event:
    """An event made elsewhere (a report's, a stored one) with its line, message and text fields redacted."""
    red = ruleset.redactions
    if red.matcher is None:
        return ev
    line, message = redact(red, ev.line), redact(red, ev.message)
    fields = {k: redact(red, v) if isinstance(v, str) else v for k, v in ev.fields.items()}
    if line == ev.line and message == ev.message and fields == dict(ev.fields):
        return ev
    return frozen.replace(ev, line=line, message=message, fields=fields)


def _add(total: dict[str, int], counts: Mapping[str, int]) -> None:
    for kind, n in counts.items():
        total[kind] = total.get(kind, 0) + n


def redact_kept(redactions: Redactions, doc: Mapping[str, Any]) -> tuple[dict, dict[str, int]]:
    """A document of kept evidence (replay/keep.py: `files` and `streams`, each line `[number, text, ...]`)
    with its lines redacted, and the count per kind."""
    total: dict[str, int] = {}
    out = dict(doc)
    for key in ("files", "streams"):
        if key not in doc:
            continue
        parts = []
        for f in doc[key]:
            lines = []
            for ln in f.get("lines", ()):
                text, counts = redact_counted(redactions, ln[1]) if isinstance(ln[1], str) else (ln[1], {})
                _add(total, counts)
                lines.append([ln[0], text, *ln[2:]] if counts else ln)
            parts.append(dict(f, lines=lines))
        out[key] = parts
    return out, total


#: The keys of a verdict document (docs/verdict.md) whose text came from a log line.
TEXT_KEYS = frozenset({"line", "message"})


def redact_document(redactions: Redactions, doc: Any) -> tuple[Any, dict[str, int]]:
    """A verdict document (or any JSON value holding events) with every event's `line`, `message` and text
    `fields` redacted, wherever the events are in it; and the count per kind."""
    total: dict[str, int] = {}

    def walk(value: Any, text_here: bool = False) -> Any:
        if isinstance(value, str):
            if not text_here:
                return value
            text, counts = redact_counted(redactions, value)
            _add(total, counts)
            return text
        if isinstance(value, list):
            return [walk(v, text_here) for v in value]
        if isinstance(value, dict):
            return {k: walk(v, text_here or k in TEXT_KEYS or k == "fields") for k, v in value.items()}
        return value

    return walk(doc), total


# -- rules check --------------------------------------------------------------------------------------------


def check_examples(ruleset: RuleSet) -> list[Problem]:
    """Every redaction example through the whole pack's redactions: a real line must come out with its span (each
    occurrence) replaced by the pattern's `[redacted:KIND]` and nothing else changed, and redacting it again must
    change nothing; a near-miss must come out as it went in."""
    red = ruleset.redactions
    problems: list[Problem] = []
    for p in red.patterns:
        for ex in p.examples:
            want = ex.line.replace(ex.span, p.marker)
            got = redact(red, ex.line)
            if got != want:
                problems.append(Problem(p.path, p.line, f"redaction {p.id}: example gives {got[:200]!r}, "
                                                        f"expected {want[:200]!r}"))
            elif redact(red, got) != got:
                problems.append(Problem(p.path, p.line, f"redaction {p.id}: redacting the example again changes "
                                                        f"it: {redact(red, got)[:200]!r}"))
        for line in p.no_match:
            got, counts = redact_counted(red, line)
            if got != line:
                problems.append(Problem(p.path, p.line, f"redaction {p.id}: near-miss redacted "
                                                        f"({', '.join(sorted(counts))}) but must not be: {line[:160]!r}"))
    return problems


def example_count(ruleset: RuleSet) -> int:
    return sum(len(p.examples) + len(p.no_match) for p in ruleset.redactions.patterns)
