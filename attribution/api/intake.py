"""Reports from hooks and connectors (the epilog payload, a job's context) as model values, ingested through
the pipeline. The service calls this; it raises InputError for a report it cannot use and StoreError when the
database refuses, and knows nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from attribution.errors import InputError
from attribution.extract.events import extract
from attribution.model import Coverage, Event, ExecutionContext
from attribution.rulepack.values import RuleSet
from attribution.scope.bundle import context_from_mapping, scheduler_observations
from attribution.serialize import coverage_from_json, event_from_json
from attribution.store.writer import CONTEXT_RANK

#: Sources a report may name: those whose rank decides whose job context wins in the store.
REPORT_SOURCES = tuple(CONTEXT_RANK)


@dataclass(frozen=True)
class Report:
    """One job's events and coverage from one reporter."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    source: str
    telemetry: Mapping[str, Any] | None = None  # {node: (prolog, epilog)} counter snapshots


def parse_report(doc: Mapping[str, Any], origin: str = "payload", max_events: int | None = None) -> Report:
    """An epilog payload ({"type": "ingest", "source", "context", "events", "coverage"}) to a Report."""
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    if doc.get("type", "ingest") != "ingest":
        raise InputError(origin, f"unknown payload type {doc.get('type')!r} (expected 'ingest')")
    source = str(doc.get("source") or "node")
    if source not in REPORT_SOURCES:
        raise InputError(origin, f"source {source!r} is not one of {', '.join(REPORT_SOURCES)}")
    ctx = parse_context(doc.get("context"), f"{origin}: context")
    events_doc = doc.get("events") or []
    coverage_doc = doc.get("coverage") or []
    if not isinstance(events_doc, list) or not isinstance(coverage_doc, list):
        raise InputError(origin, "events and coverage must be lists")
    if max_events is not None and len(events_doc) > max_events:
        raise InputError(origin, f"{len(events_doc)} events in one batch; at most {max_events} are accepted")
    events = tuple(_convert(event_from_json, d, f"{origin}: events[{i}]") for i, d in enumerate(events_doc))
    coverage = tuple(_convert(coverage_from_json, d, f"{origin}: coverage[{i}]") for i, d in enumerate(coverage_doc))
    telemetry = None
    if doc.get("telemetry"):
        from attribution.node.epilog import telemetry_from_json

        try:
            telemetry = telemetry_from_json(doc["telemetry"])
        except ValueError as exc:
            raise InputError(f"{origin}: telemetry", str(exc)) from None
    return Report(ctx, events, coverage, source, telemetry)


def parse_context(doc: Any, origin: str = "context") -> ExecutionContext:
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    try:
        return context_from_mapping(dict(doc), origin)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(origin, str(exc)) from None


def context_report(ruleset: RuleSet, doc: Mapping[str, Any], cluster: str, job_id: str, source: str = "api",
                   origin: str = "context") -> Report:
    """A job's context alone (the controller or a connector): the scheduler's word on the job (its state, the
    failed node) becomes events the way the controller hook makes them."""
    if source not in REPORT_SOURCES:
        raise InputError(origin, f"source {source!r} is not one of {', '.join(REPORT_SOURCES)}")
    if not isinstance(doc, Mapping):
        raise InputError(origin, "expected a JSON object")
    doc = dict(doc)
    for key, value in (("cluster", cluster), ("job_id", job_id)):
        if doc.get(key) in (None, ""):
            doc[key] = value
        elif str(doc[key]) != value:
            raise InputError(origin, f"{key} {doc[key]!r} does not match the path ({value!r})")
    ctx = parse_context(doc, origin)
    events = tuple(extract(ruleset, ctx, scheduler_observations(ctx)))
    return Report(ctx, events, (), source)


def ingest_report(ruleset: RuleSet, engine, report: Report, deadline: float | None = None):
    """Store a report and re-attribute its job (pipeline.ingest); returns (IngestResult, Verdict)."""
    from attribution.pipeline import ingest

    return ingest(ruleset, engine, report.context, list(report.events), list(report.coverage), report.source,
                  deadline=deadline, telemetry=report.telemetry)


def _convert(fn, d: Any, origin: str):
    if not isinstance(d, Mapping):
        raise InputError(origin, "expected a JSON object")
    try:
        return fn(dict(d))
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise InputError(origin, str(exc) or type(exc).__name__) from None
