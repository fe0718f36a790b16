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
