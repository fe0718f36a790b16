"""intake: an observation document (a node's or the controller's, intake/codec.py) through the one pipeline.

Every report of a job arrives this way, from the service (`POST /v1/observations`), from a spool replayed on the
controller, or from the controller's own epilog: decoded once, then scope (the job's context from the Slurm values
it carries), collect (a node's blocks of raw lines parsed with the pack's prefilter; its counter snapshots parsed),
extract, and ingest, which stores the piece with the lines kept for replay and re-attributes the job.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from attribution.extract.events import extract
from attribution.frozen import Value, replace
from attribution.intake.codec import Bounds, ControllerReport, NodeReport, decode
from attribution.model import Coverage, Event, ExecutionContext
from attribution.rulepack.values import RuleSet

UTC = timezone.utc


class Piece(Value):
    """One report as the store takes it: the job's context, the events, the coverage, the counter snapshots and
    the reporter's lines kept for replay."""

    context: ExecutionContext
    events: tuple[Event, ...]
    coverage: tuple[Coverage, ...]
    source: str  # node | controller
    telemetry: Any = None  # {node: (prolog, epilog)}
    evidence: dict | None = None


def _time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


def node_piece(ruleset: RuleSet, report: NodeReport) -> Piece:
    """A node's report: its window's context, its logs' blocks parsed and extracted, its snapshots evaluated."""
    from attribution.collect.nodelogs import NodeLogSpec, iter_node_blocks
    from attribution.replay.keep import LineKeeper, bundle_place
    from attribution.scope.slurm import job_window, node_context, parse_env

    env = parse_env(report.slurm)
    window = job_window(env, _time(report.now), _time(report.prolog_start),
                        86400 if report.lookback is None else report.lookback)
    ctx = node_context(env, window, report.cluster, _time(report.boot))
    if report.zone:
        ctx = replace(ctx, timezone=report.zone)
    node = report.node
    keeper = LineKeeper(ruleset)
    observations = []
    coverage: list[Coverage] = []
    for log in report.logs:
        notes = list(log.notes)
        spec = NodeLogSpec(log.source, node, log.origin)
        observations += iter_node_blocks(log.blocks, spec, ctx, ruleset.prefilter(log.source), notes)
        place = bundle_place(log.source, node, log.origin)
        for first, lines in log.blocks:
            keeper.feed(log.source, node, place, "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n",
                        base=first - 1, origin=log.origin)
        if log.cut:
            notes.append("the node kept only part of its lines worth a look (ATTRIBUTION_KEPT_BYTES) or of "
                         "its error-looking lines (2,000)")
        coverage.append(Coverage(log.source, node, log.status, lines=log.lines, reason=log.reason,
                                 file=log.origin, notes=tuple(notes)))
    events = extract(ruleset, ctx, observations)
    telemetry = None
    if report.counters:
        from attribution.collect.telemetry import coverage_of, parse_snapshot
        from attribution.extract.counters import evaluate

        shown = report.counters_folder or "telemetry"
        memo: dict = {}  # the epilog's nvidia-smi document, unchanged since the prolog's, is not parsed again
        pro = parse_snapshot(report.counters.get("prolog") or {}, "prolog", f"{shown}/prolog", memo)
        epi = parse_snapshot(report.counters.get("epilog") or {}, "epilog", f"{shown}/epilog", memo)
        if pro is not None or epi is not None:
            telemetry = {node: (pro, epi)}
            events = sorted(events + evaluate(ruleset, ctx, node, pro, epi), key=Event.sort_key)
            coverage.append(coverage_of(node, pro, epi, shown))
    return Piece(ctx, tuple(events), tuple(coverage), "node", telemetry, keeper.document(reporter=node))


def controller_piece(ruleset: RuleSet, report: ControllerReport) -> Piece:
    """The controller's report: the job's final context, its output's observations and the scheduler's own word
    on the job (its state, the failed node), extracted."""
    from attribution.scope.bundle import scheduler_observations

    ctx = report.context
    events = extract(ruleset, ctx, list(report.observations) + scheduler_observations(ctx))
    return Piece(ctx, tuple(events), report.coverage, "controller", None,
                 dict(report.evidence) if report.evidence is not None else None)


def piece_of(ruleset: RuleSet, report: NodeReport | ControllerReport) -> Piece:
    return node_piece(ruleset, report) if isinstance(report, NodeReport) else controller_piece(ruleset, report)


def decode_document(doc: Any, origin: str = "document", bounds: Bounds = Bounds()):
    """intake.codec.decode: the document's values (InputError for a document that breaks a rule)."""
    return decode(doc, origin, bounds)


def ingest_document(ruleset: RuleSet, engine, report: NodeReport | ControllerReport, deadline: float | None = None,
                    attribute: bool = True):
    """Store one decoded report and re-attribute its job (pipeline.ingest); (IngestResult, Verdict or None)."""
    from attribution.pipeline.ingest import ingest

    p = piece_of(ruleset, report)
    return ingest(ruleset, engine, p.context, list(p.events), list(p.coverage), p.source, deadline=deadline,
                  telemetry=p.telemetry, evidence_piece=p.evidence, attribute=attribute)
