"""What the pack still misses: the error-looking lines no rule matched, grouped into templates with Drain
(drain3, the log-template miner of IBM Research / logpai), ranked by the failed GPU-hours and jobs that show
them, each with a rule skeleton for a person to review. Pure (no store, no files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Drain's settings: similarity threshold, parse-tree depth (drain3's defaults).
SIM_THRESHOLD = 0.4
DEPTH = 4
MAX_EXAMPLES = 3
PARAM = "<*>"
_WS = re.compile(r"\s+")


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

    @property
    def failed_gpu_hours(self) -> float:
        return round(sum(self.gpu_hours.values()), 3)

    def to_dict(self) -> dict:
        return {"template": self.template, "source": self.source, "jobs": len(self.jobs),
                "unknown_jobs": len(self.unknown_jobs), "failed_gpu_hours": self.failed_gpu_hours,
                "lines": self.lines, "examples": [{"job": e.job, "location": e.location, "line": e.line}
                                                  for e in self.examples],
                "skeleton": skeleton(self)}


def _miner():
    try:
        from drain3 import TemplateMiner
        from drain3.template_miner_config import TemplateMinerConfig
    except ImportError:
        from attribution.errors import ConfigError

        raise ConfigError("rules suggest needs drain3: pip install 'attribution[suggest]'") from None

    config = TemplateMinerConfig()  # explicit: never read a drain3.ini from the working directory
    config.drain_sim_th = SIM_THRESHOLD
    config.drain_depth = DEPTH
    config.parametrize_numeric_tokens = True
    config.profiling_enabled = False
    return TemplateMiner(config=config)


def mine(lines: list[Unmatched], min_jobs: int = 3) -> list[Template]:
    """Templates shown by at least `min_jobs` jobs, most failed GPU-hours first, then most jobs, then most jobs
    whose verdict is unknown. Each source is mined apart (a rule belongs to one source)."""
    out: list[Template] = []
    for source in sorted({u.source for u in lines}):
        miner = _miner()
        members: dict[int, list[Unmatched]] = {}
        for u in lines:
            if u.source == source:
                r = miner.add_log_message(_WS.sub(" ", u.text.strip()))
                members.setdefault(r["cluster_id"], []).append(u)
        for cluster in miner.drain.clusters:
            t = Template(cluster.get_template(), source)
            for u in members.get(cluster.cluster_id, ()):
                t.lines += 1
                if u.job not in t.jobs and len(t.examples) < MAX_EXAMPLES:
                    t.examples.append(u)
                t.jobs.add(u.job)
                t.gpu_hours[u.job] = u.gpu_hours
                if u.unknown:
                    t.unknown_jobs.add(u.job)
            if len(t.jobs) >= min_jobs:
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


def _rule_id(template: str) -> str:
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", template.replace(PARAM, " ").lower()) if len(w) > 1]
    return "suggested." + ("_".join(words[:5]) or "line")


def skeleton(t: Template) -> str:
    """A rules file (type: rules) with one rule for the template; `kind: TODO` until a person names the kind."""
    import yaml

    doc = {"type": "rules", "rules": [{
        "id": _rule_id(t.template),
        "source": t.source,
        "description": (f"Suggested by `attribution rules suggest` from {len(t.jobs)} failed job(s) "
                        f"({t.failed_gpu_hours} GPU-hours, {len(t.unknown_jobs)} unknown): review the pattern, "
                        f"name the kind, add near-misses."),
        "pattern": template_pattern(t.template),
        "kind": "TODO",
        "examples": {"match": [{"line": e.line, "ref": f"FLEET {e.job} {e.location}"} for e in t.examples]},
    }]}
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
