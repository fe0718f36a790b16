"""A job's context posted by a connector or the controller as a report, and any report into the store through the
pipeline. The service calls this; it raises InputError for a report it cannot use and StoreError when the
database refuses, and knows nothing of HTTP. (Observation documents have their codec in intake/codec.py.)
"""

from __future__ import annotations

from typing import Any, Mapping

from attribution.errors import InputError
from attribution.frozen import Value
from attribution.model import Coverage, Event, ExecutionContext
from attribution.rulepack.values import RuleSet
from attribution.serialize import context_from_document
from attribution.store.jobs import CONTEXT_PRECEDENCE

#: Sources a report may name: those whose precedence decides whose job context wins in the store.
REPORT_SOURCES = tuple(CONTEXT_PRECEDENCE)


parse_context = context_from_document


class Report(Value):
    """One report for the pipeline: a job's context (and the scheduler's events from it), or a decoded
    observation document's piece (pipeline/intake.py) with its counter snapshots and its kept lines."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    source: str
    telemetry: Mapping[str, Any] | None = None  # {node: (prolog, epilog)} parsed counter snapshots
    evidence: Mapping[str, Any] | None = None  # the reporter's kept lines (serialize.evidence_from_json's form)


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
    from attribution.pipeline.diagnose import scheduler_events

    ctx = parse_context(doc, origin)
    return Report(ctx, tuple(scheduler_events(ruleset, ctx)), (), source)


def ingest_report(ruleset: RuleSet, engine, report: Report, deadline: float | None = None,
                  attribute: bool = True):
    """Store a report and re-attribute its job (pipeline.ingest; `attribute` False leaves that to the next report
    of the job, which the caller knows is coming); returns (IngestResult, Verdict or None)."""
    from attribution.pipeline.ingest import ingest

    return ingest(ruleset, engine, report.context, list(report.events), list(report.coverage), report.source,
                  deadline=deadline, telemetry=report.telemetry, evidence_piece=report.evidence,
                  attribute=attribute)
