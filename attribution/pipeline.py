"""The one place that wires the stages: scope -> collect -> extract -> correlate.

The CLI, the hooks and the API are thin entry points over these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .collect.bundle import collect_bundle
from .correlate import correlate
from .errors import InputError
from .extract import extract
from .model import Coverage, Event, ExecutionContext, Observation, Verdict
from .rulepack import RuleSet
from .scope import load_context, scheduler_observations


@dataclass(frozen=True)
class Diagnosis:
    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    verdict: Verdict


def attribute(ruleset: RuleSet, ctx: ExecutionContext, events: list[Event], coverage: list[Coverage],
              max_symptoms: int | None = None) -> Verdict:
    """Re-attribute a job from events already extracted (e.g. read back from the store)."""
    return correlate(ruleset, ctx, events, coverage, max_symptoms=max_symptoms)


def diagnose_observations(ruleset: RuleSet, ctx: ExecutionContext, observations: list[Observation],
                          coverage: list[Coverage], max_symptoms: int | None = None) -> Diagnosis:
    obs = list(observations) + scheduler_observations(ctx)
    events = extract(ruleset, ctx, obs)
    verdict = correlate(ruleset, ctx, events, coverage, max_symptoms=max_symptoms)
    return Diagnosis(ctx, tuple(events), tuple(coverage), verdict)


def diagnose_bundle(ruleset: RuleSet, bundle: Path, max_symptoms: int | None = None) -> Diagnosis:
    bundle = Path(bundle)
    if not bundle.exists():
        raise InputError(str(bundle), "no such bundle")
    if not bundle.is_dir():
        raise InputError(str(bundle), "not a directory (an incident bundle is a folder with context.yaml)")
    ctx = load_context(bundle / "context.yaml")
    observations, coverage = collect_bundle(bundle, ctx, ruleset.prefilter)
    return diagnose_observations(ruleset, ctx, observations, coverage, max_symptoms)


def ingest(ruleset: RuleSet, engine, ctx: ExecutionContext, events: list[Event], coverage: list[Coverage],
           source: str, deadline: float | None = None):
    """Store a job's events and coverage and re-attribute the job from everything stored for it.

    Idempotent: the same input twice adds no event and no verdict. Any number of processes may ingest
    pieces of one job concurrently (node epilogs, the controller); each re-attribution sees all pieces
    stored before it, so the last one leaves the verdict of the whole evidence.
    """
    from .render import verdict_to_dict
    from .store import in_transaction
    from .store.writer import IngestResult, JobSession

    from .correlate import in_window, job_window

    lo, hi = job_window(ctx, ruleset.graph)
    inside = [e for e in events if in_window(e, lo, hi)]
    outside = [e for e in events if not in_window(e, lo, hi)]

    def work(conn):
        s = JobSession(conn, ctx, source)
        new, linked = s.add_events(inside)
        new += s.add_events(outside, link=False)[0]
        s.set_coverage(coverage)
        stored_ctx = s.stored_context()
        verdict = correlate(ruleset, stored_ctx, s.events(), s.coverage())
        vid, changed = s.save_verdict(verdict, verdict_to_dict(verdict))
        return IngestResult(s.job, new, linked, vid, changed), verdict

    return in_transaction(engine, work, deadline=deadline)


def ingest_bundle(ruleset: RuleSet, engine, bundle: Path):
    d = diagnose_bundle(ruleset, bundle)
    return ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), source="bundle")
