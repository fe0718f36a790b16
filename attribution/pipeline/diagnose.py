"""diagnose: one job's evidence to its verdict, the one algorithm every diagnosis runs.

Each observation is extracted as it is read and its symptoms folded into a digest (correlate.digest), so memory is
bounded by the causes, not by the logs; the verdict lists the first `listed` symptoms (the totals and the groups
count them all). `keep_events` asks it to keep every event as well: what a store needs (ingest keeps every event)
and what the timeline page draws (`diagnose --html`).
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import Iterable

from attribution.collect.bundle import stream_bundle
from attribution.collect.telemetry import collect_bundle_telemetry
from attribution.correlate.digest import SymptomDigest
from attribution.correlate.rootcause import correlate
from attribution.errors import InputError
from attribution.extract.events import believable_window, extract, extract_one, untrusted_time_dropped
from attribution.frozen import Value
from attribution.model import Coverage, Event, ExecutionContext, Observation, Verdict
from attribution.rulepack.values import RuleSet
from attribution.scope.bundle import load_context, scheduler_observations
from attribution.timeparse import resolve_zone

#: How many symptoms a verdict lists when nobody asked for a number (the totals and groups count them all).
LISTED_SYMPTOMS = 1000


class Diagnosis(Value):
    """One job's context, events, coverage and verdict. `events`: every event when the diagnosis kept them
    (keep_events), else the causes, the context events and the listed symptoms."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    verdict: Verdict
    #: what the live connectors read, kept for replay (a piece: replay/keep.py, replay/streams.py), when asked for
    #: and the job failed
    evidence: dict | None = None


def scheduler_events(ruleset: RuleSet, ctx: ExecutionContext) -> list[Event]:
    """The scheduler's word on a job (its state, the failed node) as events, the way the controller hook makes them."""
    return extract(ruleset, ctx, scheduler_observations(ctx))


def diagnose_stream(ruleset: RuleSet, ctx: ExecutionContext, observations: Iterable[Observation],
                    coverage: list[Coverage] | None = None, extra_events: Iterable[Event] = (),
                    listed: int | None = None, keep_events: bool = True) -> Diagnosis:
    """The one diagnosis: `observations` (any iterable, read once; the scheduler's own are added) extracted one at
    a time, the job's events folded as they come, `extra_events` (counters, metric series) with them. `coverage`
    may be filled while `observations` is read (a bundle's readers append to it)."""
    coverage = [] if coverage is None else coverage
    zone = resolve_zone(ctx.timezone)
    lo, hi = believable_window(ruleset, ctx)
    digest = SymptomDigest(ruleset.graph, ctx, LISTED_SYMPTOMS if listed is None else listed)
    every: list[Event] | None = [] if keep_events else None
    for obs in chain(observations, scheduler_observations(ctx)):
        got = [untrusted_time_dropped(e, lo, hi) for e in extract_one(ruleset, ctx, obs, zone)]
        digest.extend(got)
        if every is not None:
            every.extend(got)
    extra = [untrusted_time_dropped(e, lo, hi) for e in extra_events]
    digest.extend(extra)
    if every is not None:
        every.extend(extra)
    verdict = correlate(ruleset, ctx, (), coverage, digest=digest)
    events = every if every is not None else digest.kept + digest.top()
    return Diagnosis(ctx, tuple(sorted(events, key=Event.sort_key)), tuple(coverage), verdict)


def diagnose_observations(ruleset: RuleSet, ctx: ExecutionContext, observations: Iterable[Observation],
                          coverage: list[Coverage], max_symptoms: int | None = None,
                          extra_events: Iterable[Event] = ()) -> Diagnosis:
    """diagnose_stream of observations in hand, every event kept."""
    return diagnose_stream(ruleset, ctx, observations, list(coverage), extra_events, max_symptoms)


def open_bundle(bundle: Path) -> tuple[Path, ExecutionContext]:
    """The bundle's folder and its context, or InputError naming what is wrong with it."""
    bundle = Path(bundle)
    if not bundle.exists():
        raise InputError(str(bundle), "no such bundle")
    if not bundle.is_dir():
        raise InputError(str(bundle), "not a directory (an incident bundle is a folder with context.yaml)")
    return bundle, load_context(bundle / "context.yaml")


def diagnose_bundle(ruleset: RuleSet, bundle: Path, listed: int | None = None,
                    keep_events: bool = True) -> Diagnosis:
    """An incident bundle (docs/bundle.md) through diagnose_stream: its logs streamed, its counter snapshots'
    events after them. `keep_events` False: memory bounded however noisy the logs (`attribution diagnose`)."""
    bundle, ctx = open_bundle(bundle)
    coverage: list[Coverage] = []
    snaps, tcov = collect_bundle_telemetry(bundle, ctx.nodes)

    def observations():  # the readers append their coverage as they finish; the snapshots' comes last
        yield from stream_bundle(bundle, ctx, ruleset.prefilter, coverage)
        coverage.extend(tcov)

    return diagnose_stream(ruleset, ctx, observations(), coverage, telemetry_events(ruleset, ctx, snaps), listed,
                           keep_events)


def telemetry_events(ruleset: RuleSet, ctx: ExecutionContext, snapshots) -> list[Event]:
    """The counter rules' events of every node's (prolog, epilog) snapshots."""
    from attribution.extract.counters import counter_rules, evaluate

    rules = counter_rules(ruleset)
    out: list[Event] = []
    for node, (pro, epi) in sorted(snapshots.items()):
        out += evaluate(ruleset, ctx, node, pro, epi, rules)
    return out
