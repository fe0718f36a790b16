"""controller: what the controller's epilog (EpilogSlurmctld, a trusted host with the full install) collects of a
job that ended: the job's final state (`scontrol show job`, read once), its stdout/stderr collected with the rule
pack's prefilter, and the lines kept for replay, as one observation document (role `controller`:
intake/codec.py). The document goes through the one intake: into the database here, or to the service.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from attribution.frozen import replace
from attribution.node.document import FORMAT
from attribution.rulepack.values import RuleSet

UTC = timezone.utc


def _fault_coverage(source: str, node: str | None, exc: Exception):
    from attribution.model import Coverage

    return Coverage(source, node, "error", reason=f"collection failed: {type(exc).__name__}: {exc}"[:500])


def _observation_json(o) -> dict:
    from attribution.timeparse import format_utc

    d = {"source": o.source, "node": o.node, "location": o.location, "text": o.text, "line": o.line,
         "time": format_utc(o.time) if o.time else None, "host": o.host, "rank": o.rank, "label": o.label}
    if o.flags:
        d["flags"] = sorted(o.flags)
    return {k: v for k, v in d.items() if v is not None}


def final_info(job_id: str, info: Mapping[str, str] | None, failed: bool) -> dict:
    """`scontrol show job` of the job (`info`: what the hook already fetched), with the final state of a newer
    Slurm's JSON when the text still says COMPLETING for a job that looks clean."""
    from attribution.scope import scontrol
    from attribution.scope.slurm import still_completing

    info = dict(info) if info is not None else dict(scontrol.show_job(job_id))
    if still_completing(info) and not failed:
        better = scontrol.show_job_json(job_id)
        if better.get("JobState") and not still_completing(better):
            info.update(JobState=better["JobState"], Reason=better.get("Reason", info.get("Reason", "")),
                        ExitCode=better.get("ExitCode") or info.get("ExitCode", ""))
    return info


def controller_document(ruleset: RuleSet, settings, environ: Mapping[str, str], info: Mapping[str, str],
                        now: float | None = None) -> tuple[dict | None, str | None]:
    """(the document, None) of the job in the controller's environment, or (None, why not) for a job that
    completed with nothing in its output worth a report. The controller is a full engine: it makes the job's
    context (scope), reads its output with the pack's prefilter (collect) and keeps the lines for replay."""
    from attribution.collect.joboutput import read_job_output
    from attribution.extract.events import extract
    from attribution.replay.keep import LineKeeper, bundle_place
    from attribution.safefile import shown_name
    from attribution.scope.bundle import scheduler_observations
    from attribution.scope.slurm import controller_context, implied_state, job_output_paths, parse_env, still_completing

    now = time.time() if now is None else now
    env = parse_env(environ)
    cluster = env.cluster or settings.cluster or "default"
    ctx = controller_context(env, info, cluster, datetime.fromtimestamp(now, tz=UTC))
    obs, cov = [], []
    keeper = LineKeeper(ruleset)
    if settings.epilog.job_output:
        for path in job_output_paths(env, info):
            shown = shown_name(str(path))
            try:
                o, c = read_job_output(path, shown, ctx, ruleset.prefilter("job"),
                                       tail_bytes=settings.epilog.job_output_bytes,
                                       tap=keeper.tap("job", None, bundle_place("job", None, path.name), shown))
            except Exception as exc:  # a fault of ours on this file: the job is still reported, with the gap
                o, c = [], replace(_fault_coverage("job", None, exc), file=shown)
            obs += o
            cov.append(c)
    if still_completing(info):  # a cancel or a time limit seen only in slurmstepd's banner
        banner = implied_state(extract(ruleset, ctx, obs))
        if banner and ctx.state in ("COMPLETED", "FAILED"):
            ctx = replace(ctx, state=banner)
    if ctx.state == "COMPLETED" and not env.failed:
        if not any(e.role == "cause" for e in extract(ruleset, ctx, obs + scheduler_observations(ctx))):
            return None, "job completed"
    return document(ctx, obs, cov, keeper.document(reporter="controller"), now), None


def document(ctx, observations, coverage, evidence: dict | None, now: float) -> dict:
    """The controller's observation document of a job (intake/codec.py decodes it)."""
    from attribution.serialize import context_to_json, coverage_to_json

    return {"format": FORMAT,
            "reporter": {"role": "controller", "name": "controller", "agent": f"attribution {_version()}"},
            "cluster": ctx.cluster, "context": context_to_json(ctx), "times": {"now": now},
            "observations": [_observation_json(o) for o in observations],
            "coverage": [coverage_to_json(c) for c in coverage], "evidence": evidence}


def _version() -> str:
    from attribution import __version__

    return __version__


def deliver(ruleset: RuleSet, settings, engine_factory, deadline: float | None, wait: bool = False):
    """Every report in the controller's spool (settings.spool), oldest first: to the service when service_url is
    set, else into the database through the one intake. A report refused for good goes to bad/."""
    from attribution.errors import InputError, StoreError
    from attribution.node import spool

    if settings.service_url:
        from attribution.node.post import Client, Refused, read_token

        if not settings.service_token_file:
            from attribution.errors import ConfigError

            raise ConfigError("service_url is set but service_token_file is not (the report token's file)")
        client = Client(settings.service_url, read_token(settings.service_token_file),
                        getattr(settings, "service_ca_file", None), settings.service.client_timeout_seconds)

        def send(doc: dict) -> None:
            try:
                client.post(doc, deadline if deadline is not None else time.monotonic() + 60)
            except Refused as exc:
                raise spool.Refused(f"refused by the service: {exc}") from exc

        return spool.flush(Path(settings.spool), send, deadline=deadline, wait_for_lock=wait)

    from attribution.pipeline.intake import decode_document, ingest_document

    with engine_factory() as engine:
        def store(doc: dict) -> None:
            try:
                ingest_document(ruleset, engine, decode_document(doc, "spooled report"), deadline=deadline)
            except InputError as exc:
                raise spool.Refused(str(exc)) from exc
            except StoreError as exc:
                if exc.permanent:
                    raise spool.Refused(str(exc)) from exc
                raise

        return spool.flush(Path(settings.spool), store, deadline=deadline, wait_for_lock=wait)
