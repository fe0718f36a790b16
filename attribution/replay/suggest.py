"""What the pack still misses: the error-looking lines no rule matched, grouped into templates with Drain
(attribution.replay.mine), ranked by the failed GPU-hours and jobs that show them, each with a rule skeleton for a
person to review. Pure (no store, no files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from attribution.replay.mine import PARAM, Drain

#: Drain's settings: similarity threshold, tokens routing a message in the parse tree (drain3's sim_th and depth 4).
SIM_THRESHOLD = 0.4
PREFIX_TOKENS = 1
MAX_EXAMPLES = 3


@dataclass(frozen=True)
class Unmatched:
    """One kept line no rule of its source matched."""

    job: str  # cluster/job_id
    source: str
    location: str
    line: str  # as logged
    text: str  # the message after the line prefix
    gpu_hours: float
    unknown: bool  # the job's verdict is `unknown`


@dataclass
class Template:
    template: str
    source: str
    jobs: set[str] = field(default_factory=set)
    unknown_jobs: set[str] = field(default_factory=set)
    gpu_hours: dict[str, float] = field(default_factory=dict)
    lines: int = 0
    examples: list[Unmatched] = field(default_factory=list)
    near_miss: str | None = None  # a line that looks alike and must not match
    near_miss_real: bool = False  # taken from the fleet's lines, not made up from an example

    @property
    def failed_gpu_hours(self) -> float:
        return round(sum(self.gpu_hours.values()), 3)

    def to_dict(self) -> dict:
        return {"template": self.template, "source": self.source, "jobs": len(self.jobs),
                "unknown_jobs": len(self.unknown_jobs), "failed_gpu_hours": self.failed_gpu_hours,
                "lines": self.lines, "near_miss": self.near_miss, "near_miss_from_fleet": self.near_miss_real,
                "examples": [{"job": e.job, "location": e.location, "line": e.line} for e in self.examples],
                "skeleton": skeleton(self)}


def unmatched(ruleset, observations, job: str, gpu_hours: float, unknown: bool) -> list[Unmatched]:
    """The observations (error-looking lines of one job) that no rule of their source matches and no `ignore:`
    entry of the pack sets aside."""
    out = []
    for o in observations:
        text = o.text.splitlines()[0] if o.text else ""
        if text.strip() and not ruleset.matching(o.source, o.text) and not ruleset.ignoring(o.source, o.text):
            out.append(Unmatched(job, o.source, o.location, o.line.splitlines()[0] if o.line else text, text,
                                 gpu_hours, unknown))
    return out


def mine(lines: list[Unmatched], min_jobs: int = 3) -> list[Template]:
    """Templates shown by at least `min_jobs` jobs, most failed GPU-hours first, then most jobs, then most jobs
    whose verdict is unknown. Each source is mined apart (a rule belongs to one source)."""
    out: list[Template] = []
    for source in sorted({u.source for u in lines}):
        miner = Drain(SIM_THRESHOLD, PREFIX_TOKENS)
        members: dict[int, list[Unmatched]] = {}
        for u in lines:
            if u.source == source:
                members.setdefault(miner.add(u.text).id, []).append(u)
        for cluster in miner.clusters:
            t = Template(cluster.template, source)
            for u in members.get(cluster.id, ()):
                t.lines += 1
                if u.job not in t.jobs and len(t.examples) < MAX_EXAMPLES:
                    t.examples.append(u)
                t.jobs.add(u.job)
                t.gpu_hours[u.job] = u.gpu_hours
                if u.unknown:
                    t.unknown_jobs.add(u.job)
            if len(t.jobs) >= min_jobs:
                others = [u for cid, us in members.items() if cid != cluster.id for u in us]
                t.near_miss, t.near_miss_real = near_miss(t, others)
                out.append(t)
    out.sort(key=lambda t: (-t.failed_gpu_hours, -len(t.jobs), -len(t.unknown_jobs), t.source, t.template))
    return out


def template_pattern(template: str) -> str:
    """An RE2 pattern matching the template: literal tokens escaped, each parameter one run of non-spaces."""
    parts = []
    for tok in template.split(" "):
        if not tok:
            continue
        pieces = tok.split(PARAM)
        parts.append(r"\S+".join(re.escape(p) for p in pieces) if len(pieces) > 1 else re.escape(tok))
    return r"\s+".join(parts)


def _matches(pattern: str, line: str) -> bool:
    return re.search(pattern, line) is not None


def near_miss(t: Template, others: list[Unmatched]) -> tuple[str | None, bool]:
    """A near-miss for the template's rule: the fleet line of the same source (from another template) sharing
    the most literal words with it, if it shares at least half of them; else its first example with its last literal word
    changed. (None, False) when neither escapes the pattern."""
    pattern = template_pattern(t.template)
    words = {w for w in t.template.split() if w != PARAM}
    best, best_n = None, (len(words) + 1) // 2 - 1
    for u in others:
        n = len(words & set(u.text.split()))
        if n > best_n and not _matches(pattern, u.line):
            best, best_n = u.line, n
    if best is not None:
        return best, True
    if not t.examples:
        return None, False
    line = t.examples[0].line
    for tok in reversed(t.template.split()):
        if PARAM in tok or not re.fullmatch(r"[A-Za-z][\w-]*[.,:;]?", tok):
            continue
        word = tok.rstrip(".,:;")
        found = list(re.finditer(r"(?<!\S)" + re.escape(word) + r"(?=[.,:;]?(?:\s|$))", line))
        if not found:
            continue
        at = found[-1]
        other = line[:at.start()] + ("ok" if word != "ok" else "fine") + line[at.end():]
        if not _matches(pattern, other):
            return other, False
    return None, False


#: The sources whose rules the node hook's grep filter must cover (rulepack.hookfilter.HOOK_SOURCES).
NODE_SOURCES = frozenset({"kernel", "fabricmanager", "node"})


def hook_strings(t: Template) -> list[str]:
    """The fixed string a node-side rule's hook_filter needs: the longest run of the template's literal tokens
    that every example holds as written (at least 3 characters); empty when there is none."""
    tokens = t.template.split()
    runs = sorted({" ".join(tokens[i:j]) for i in range(len(tokens)) for j in range(i + 1, len(tokens) + 1)
                   if PARAM not in " ".join(tokens[i:j])}, key=lambda r: (-len(r), r))
    for run in runs:
        if len(run) >= 3 and all(run in e.line for e in t.examples):
            return [run]
    return []


def _rule_id(template: str) -> str:
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", template.replace(PARAM, " ").lower()) if len(w) > 1]
    return "suggested." + ("_".join(words[:5]) or "line")


def skeleton(t: Template) -> str:
    """A rules file (type: rules) with one rule for the template; `kind: TODO` until a person names the kind."""
    import yaml

    made_up = "" if t.near_miss is None or t.near_miss_real else (
        " The near-miss is an example with its last word changed (no fleet line looked alike): replace it with a "
        "real one.")
    examples: dict = {"match": [{"line": e.line, "ref": f"FLEET {e.job} {e.location}"} for e in t.examples]}
    if t.near_miss is not None:
        examples["no_match"] = [t.near_miss]
    rule = {
        "id": _rule_id(t.template),
        "source": t.source,
        "description": (f"Suggested by `attribution rules suggest` from {len(t.jobs)} failed job(s) "
                        f"({t.failed_gpu_hours} GPU-hours, {len(t.unknown_jobs)} unknown): review the pattern, "
                        f"name the kind, add near-misses.{made_up}"),
        "pattern": template_pattern(t.template),
        "kind": "TODO",
    }
    if t.source in NODE_SOURCES:
        rule["description"] += " Then regenerate the node hook's filter: attribution rules filter > hooks/suspicious.patterns."
        rule["hook_filter"] = hook_strings(t)
    rule["examples"] = examples
    doc = {"type": "rules", "rules": [rule]}
    return yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def render_text(templates: list[Template]) -> str:
    if not templates:
        return "no recurring unmatched error-looking lines"
    out = []
    for i, t in enumerate(templates, 1):
        out.append(f"# {i}. [{t.source}] {t.template}")
        out.append(f"#    {len(t.jobs)} job(s), {len(t.unknown_jobs)} unknown, {t.failed_gpu_hours} failed GPU-hours, "
                   f"{t.lines} line(s)")
        out.append(skeleton(t).rstrip())
        out.append("")
    return "\n".join(out).rstrip()
