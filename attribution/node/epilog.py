"""What the Slurm hooks do once they decided a job is worth a look: collect, extract, store, or spool.

`run_node` (node Epilog) reads this node's kernel and Fabric Manager logs for the job window; `run_controller`
(EpilogSlurmctld) reads the job's stdout/stderr and the final job state. Both store through the normal ingest
(which re-attributes the job from every piece stored so far), within a deadline; when the database is away or
slow they write the payload to the spool and return. Replays of the spool go through `replay`.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from attribution.frozen import Value, replace
from attribution.node import spool
from attribution.collect.live import LiveSources, boot_time, collect_node
from attribution.errors import InputError, StoreError
from attribution.extract.events import extract
from attribution.model import Coverage, Event, ExecutionContext, Observation
from attribution.replay.keep import LineKeeper, bundle_place
from attribution.safefile import shown_name
from attribution.scope.bundle import scheduler_observations
from attribution.serialize import Report, report_from_json, report_to_json
from attribution.scope.slurm import (EpilogEnv, controller_context, implied_state, job_output_paths, job_window,
                                     node_context, still_completing)

if TYPE_CHECKING:
    from attribution.config import Settings
    from attribution.rulepack.values import RuleSet

UTC = timezone.utc


class HookReport(Value, frozen=False):
    """What one hook run did, for its log line."""

    role: str
    job_id: str
    events: int = 0
    stored: bool = False
    spooled: Path | None = None
    skipped: str | None = None
    error: str | None = None
    replayed: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        parts = [f"{self.role} job {self.job_id}", f"{self.events} event(s)"]
        if self.replayed:
            parts.append(f"replayed {self.replayed} spooled")
        if self.skipped:
            parts.append(f"skipped: {self.skipped}")
        if self.stored:
            parts.append("stored")
        if self.spooled:
            parts.append(f"spooled to {self.spooled}")
        if self.error:
            parts.append(f"error: {self.error}")
        parts.append(f"{self.seconds:.3f}s")
        return "; ".join(parts)


def read_prolog_stamp(state_dir: Path, job_id: str) -> tuple[datetime | None, dict[str, int]]:
    """The start time and log offsets `hooks/prolog` wrote when the job started on this node."""
    p = state_dir / f"job-{job_id}.start"
    try:
        text = p.read_text()
    except OSError:
        return None, {}
    start = None
    offsets: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if not value.strip().isdigit():
            continue
        if key == "start":
            start = datetime.fromtimestamp(int(value), tz=UTC)
        elif key.endswith("_offset"):
            offsets[key[: -len("_offset")]] = int(value)
    return start, offsets


def payload(ctx: ExecutionContext, events: list[Event], coverage: list[Coverage], source: str,
            telemetry: Mapping | None = None, evidence: Mapping | None = None) -> dict:
    out = report_to_json(Report(ctx, tuple(events), tuple(coverage), source, evidence=evidence))
    if telemetry:
        out["telemetry"] = telemetry_to_json(telemetry)
    return out


def telemetry_to_json(telemetry: Mapping) -> dict:
    """{node: {prolog, epilog}} of counter snapshots, as a report payload carries them."""
    from attribution.collect.telemetry import snapshot_to_json

    return {node: {phase: snapshot_to_json(s) for phase, s in zip(("prolog", "epilog"), pair) if s is not None}
            for node, pair in telemetry.items()}


def telemetry_from_json(data: Mapping | None) -> dict:
    """The inverse of telemetry_to_json. Raises TelemetryError (a ValueError) on a malformed one."""
    from attribution.collect.telemetry import TelemetryError, snapshot_from_json

    if not data:
        return {}
    if not isinstance(data, Mapping):
        raise TelemetryError("telemetry: expected a mapping of node to snapshots")
    out = {}
    for node, phases in data.items():
        if not isinstance(phases, Mapping):
            raise TelemetryError(f"telemetry of {node}: expected a mapping of phase to snapshot")
        got = {p: snapshot_from_json(phases[p]) for p in ("prolog", "epilog") if phases.get(p) is not None}
        out[str(node)] = (got.get("prolog"), got.get("epilog"))
    return out


def replay(ruleset: RuleSet, engine, data: Mapping, deadline: float | None = None) -> None:
    """Store one spooled payload (the spool's flush handler). A payload that is malformed, or that the database
    refuses for its content, raises spool.Refused (moved aside); an unreachable database raises StoreError."""
    from attribution.pipeline import ingest

    try:
        r = report_from_json(data, "spooled payload", type_required=True)
        telemetry = telemetry_from_json(data.get("telemetry"))
    except (InputError, ValueError) as exc:  # TelemetryError is a ValueError
        raise spool.Refused(f"malformed payload: {exc}") from exc
    try:
        ingest(ruleset, engine, r.context, list(r.events), list(r.coverage), r.source, deadline=deadline,
               telemetry=telemetry, evidence_piece=r.evidence)
    except InputError as exc:
        raise spool.Refused(str(exc)) from exc
    except StoreError as exc:
        if exc.permanent:
            raise spool.Refused(str(exc)) from exc
        raise


def replay_to_service(client, data: Mapping, deadline: float | None = None) -> None:
    """Send one spooled payload to the service (the spool's flush handler when service_url is set). A payload the
    service refuses for good (malformed) is moved aside to `bad/` with the reason instead of blocking the spool."""
    from attribution.node.service_client import ServiceRejected

    try:
        client.post_observations(dict(data), deadline=deadline)
    except ServiceRejected as exc:
        raise spool.Refused(f"refused by the service: {exc}") from exc


def send_or_spool(settings: Settings, data: dict, deadline: float, report: HookReport) -> None:
    """Report to the service at settings.service_url, then replay what the spool holds; spool on any failure."""
    from attribution.node.service_client import client_from_settings

    try:
        with client_from_settings(settings) as client:
            client.post_observations(data, deadline=deadline)
            report.stored = True
            if time.monotonic() < deadline:
                res = spool.flush(settings.spool, lambda d: replay_to_service(client, d, deadline),
                                  deadline=deadline)
                report.replayed = res.replayed
    except Exception as exc:  # the service is away, slow, refused, or its token is unreadable: nothing may be lost
        report.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if not report.stored:
            report.spooled = spool.write(settings.spool, data)


def store_or_spool(ruleset: RuleSet, engine_factory: Callable, settings: Settings, ctx: ExecutionContext,
                   events: list[Event], coverage: list[Coverage], source: str, deadline: float,
                   report: HookReport, telemetry: Mapping | None = None, evidence: Mapping | None = None) -> None:
    """Store through the service when settings.service_url is set, else in the database; spool on failure.
    `evidence`: this reporter's lines kept for replay (replay.keep.LineKeeper's document)."""
    if settings.service_url:
        send_or_spool(settings, payload(ctx, events, coverage, source, telemetry, evidence), deadline, report)
        return
    from attribution.pipeline import ingest  # the database path only: the service path loads no store

    try:
        with engine_factory() as engine:
            ingest(ruleset, engine, ctx, events, coverage, source, deadline=deadline, telemetry=telemetry,
                   evidence_piece=evidence)
            report.stored = True
            if time.monotonic() < deadline:
                res = spool.flush(settings.spool, lambda d: replay(ruleset, engine, d, deadline), deadline=deadline)
                report.replayed = res.replayed
    except Exception as exc:  # the database is away, slow or refused: nothing may be lost
        report.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        report.spooled = spool.write(settings.spool, payload(ctx, events, coverage, source, telemetry, evidence))


def run_node(ruleset: RuleSet, settings: Settings, env: EpilogEnv, engine_factory, deadline: float,
             now: datetime | None = None, sources: LiveSources | None = None,
             telemetry_dir: Path | None = None) -> HookReport:
    t0 = time.monotonic()
    report = HookReport("node", env.job_id)
    now = now or datetime.now(UTC)
    state_dir = Path(settings.epilog.state_dir) if settings.epilog.state_dir else settings.home / "state"
    prolog_start, offsets = read_prolog_stamp(state_dir, env.job_id)
    window = job_window(env, now, prolog_start, settings.epilog.lookback_seconds)
    cluster = env.cluster or settings.cluster or "default"
    node = env.node or os.uname().nodename.split(".")[0]
    ctx = node_context(env, window, cluster, boot_time())
    sources = sources or LiveSources(kernel=settings.epilog.kernel_source, kernel_file=settings.epilog.kernel_file,
                                     fabricmanager_log=settings.epilog.fabricmanager_log,
                                     timeout=max(1.0, (deadline - time.monotonic()) / 3),
                                     max_bytes=settings.epilog.node_log_bytes)
    keeper = LineKeeper(ruleset)  # the lines kept for replay, as the readers stream the logs (one pass)
    faulted = False
    try:
        obs, cov = collect_node(sources, node, ctx, ruleset.prefilter, window.start, window.end, offsets,
                                margins=ruleset.graph.margins(),
                                tap_for=lambda source, where: keeper.tap(source, node,
                                                                         bundle_place(source, node, where), where))
        events = extract(ruleset, ctx, obs)
    except Exception as exc:  # a reader's or a rule's fault must not lose the job: it is stored with the gap
        events, cov, faulted = [], [fault_coverage("kernel", node, exc)], True
    telemetry = None
    if telemetry_dir is not None:
        try:
            telemetry, tev, tcov = node_telemetry(ruleset, ctx, node, Path(telemetry_dir))
        except Exception as exc:  # the same for the counter snapshots
            telemetry, tev, tcov, faulted = None, [], [fault_coverage("telemetry", node, exc)], True
        events = sorted(events + tev, key=Event.sort_key)
        cov = list(cov) + tcov
    report.events = len(events)
    if not events and not env.failed and not faulted:
        report.skipped = "clean job, nothing to store"
    else:
        store_or_spool(ruleset, engine_factory, settings, ctx, events, cov, "node", deadline, report, telemetry,
                       keeper.document(reporter=node))
    _forget_stamp(state_dir, env.job_id)
    report.seconds = time.monotonic() - t0
    return report


def fault_coverage(source: str, node: str | None, exc: Exception) -> Coverage:
    """The coverage of a collection that failed on a fault of ours (not a missing or unreadable source, which the
    readers report themselves): the report still goes out, saying what could not be read and why."""
    return Coverage(source, node, "error", reason=f"collection failed: {type(exc).__name__}: {exc}"[:500])


def node_telemetry(ruleset: RuleSet, ctx: ExecutionContext, node: str, folder: Path):
    """({node: (prolog, epilog)}, events, coverage) of the snapshots the hooks took in `folder`."""
    from attribution.collect.telemetry import coverage_of, read_snapshot
    from attribution.extract.counters import evaluate

    pro = read_snapshot(folder / "prolog", "prolog")
    epi = read_snapshot(folder / "epilog", "epilog")
    if pro is None and epi is None:
        return None, [], []
    events = evaluate(ruleset, ctx, node, pro, epi)
    return {node: (pro, epi)}, events, [coverage_of(node, pro, epi, str(folder))]


def _forget_stamp(state_dir: Path, job_id: str) -> None:
    try:
        (state_dir / f"job-{job_id}.start").unlink()
    except OSError:
        pass


def run_controller(ruleset: RuleSet, settings: Settings, env: EpilogEnv, engine_factory, deadline: float,
                   info: Mapping[str, str] | None = None, now: datetime | None = None) -> HookReport:
    from attribution.collect.joboutput import read_job_output  # the controller's only: a node never loads it

    t0 = time.monotonic()
    report = HookReport("controller", env.job_id)
    now = now or datetime.now(UTC)
    from attribution.scope import scontrol

    info = info if info is not None else scontrol.show_job(env.job_id)
    if still_completing(info) and not env.failed:
        # exit 0:0 in the environment and COMPLETING in the text: a newer Slurm's JSON knows the final state
        better = scontrol.show_job_json(env.job_id)
        if better.get("JobState") and not still_completing(better):
            info = {**info, "JobState": better["JobState"], "Reason": better.get("Reason", info.get("Reason", "")),
                    "ExitCode": better.get("ExitCode") or info.get("ExitCode", "")}
    cluster = env.cluster or settings.cluster or "default"
    ctx = controller_context(env, info, cluster, now)
    obs: list[Observation] = []
    cov: list[Coverage] = []
    keeper = LineKeeper(ruleset)
    if settings.epilog.job_output:
        for path in job_output_paths(env, info):
            shown = shown_name(str(path))
            try:
                o, c = read_job_output(path, shown, ctx, ruleset.prefilter("job"),
                                       tail_bytes=settings.epilog.job_output_bytes,
                                       tap=keeper.tap("job", None, bundle_place("job", None, path.name), shown))
            except Exception as exc:  # a fault of ours on this file: the job is still stored, with the gap
                o, c = [], replace(fault_coverage("job", None, exc), file=shown)
            obs += o
            cov.append(c)
    try:
        banner_state = implied_state(extract(ruleset, ctx, obs)) if still_completing(info) else None
        if banner_state and ctx.state in ("COMPLETED", "FAILED"):
            ctx = replace(ctx, state=banner_state)
        events = extract(ruleset, ctx, obs + scheduler_observations(ctx))
    except Exception as exc:  # the scheduler's own events still tell what Slurm saw
        cov.append(fault_coverage("job", None, exc))
        events = extract(ruleset, ctx, scheduler_observations(ctx))
    report.events = len(events)
    if ctx.state == "COMPLETED" and not env.failed and not any(e.role == "cause" for e in events):
        report.skipped = "job completed"
    else:
        store_or_spool(ruleset, engine_factory, settings, ctx, events, cov, "controller", deadline, report,
                       evidence=keeper.document(reporter="controller"))
    report.seconds = time.monotonic() - t0
    return report


__all__ = ["run_node", "run_controller", "replay", "replay_to_service", "read_prolog_stamp",
           "HookReport",
           "StoreError"]
