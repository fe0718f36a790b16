"""`attribution backfill`: diagnose and store every failed Slurm job of a time range (from sacct).

Resumable: jobs the store already has a verdict for are skipped (the jobs table is the cursor), and jobs are done
oldest end first, so an interrupted run picks up where it stopped.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime, timezone

import click

from attribution.cli import main, ruleset_of, settings_of
from attribution.cli.connector_options import apply_connector_options, connector_options
from attribution.cli.times import FORMS, when

UTC = timezone.utc


@main.command()
@click.option("--since", required=True, metavar="TIME", help=f"Jobs that ended at or after this time: {FORMS}")
@click.option("--until", default=None, metavar="TIME", help="... and before this time (default: now).")
@click.option("--redo", is_flag=True, help="Diagnose jobs again even when the store already has them.")
@click.option("--kueue", is_flag=True, help="Kueue workloads from the Kubernetes API instead of Slurm jobs (the runs "
                                            "the API server still holds, stored as `watch kueue` stores them).")
@connector_options
@click.pass_context
def backfill(ctx: click.Context, since: str, until: str | None, redo: bool, kueue: bool, **connector_flags) -> None:
    """Diagnose and store every failed Slurm job that ended in a time range (sacct), with a progress bar, or with
    --kueue every failed Kueue workload run. Resumable: a re-run skips the jobs already stored."""
    from attribution.errors import InputError
    from attribution.pipeline.ingest import ingest_diagnosis
    from attribution.pipeline.live import diagnose_sacct_job, failed_slurm_jobs
    from attribution.scope.sacct import context_of
    from attribution.store.jobkeys import is_stored, stored_job_starts
    from attribution.cli.db import open_store

    now = datetime.now(UTC)
    since_t = when("--since", since, now)
    until_t = when("--until", until, now) or now
    if until_t <= since_t:
        raise InputError("--until", "must be after --since")
    if kueue:
        from attribution.cli.watch import backfill_kueue_command

        # the connector flags apply to the Kueue form too (its Loki, Prometheus, files)
        ctx.find_root().obj["settings"] = apply_connector_options(settings_of(ctx), **connector_flags)
        return backfill_kueue_command(ctx, since_t, until_t, redo, connector_flags.get("cluster"))
    settings = apply_connector_options(settings_of(ctx), **connector_flags)
    rs = ruleset_of(ctx)
    jobs = failed_slurm_jobs(settings.connectors, since_t, until_t)
    contexts = []
    never_ran = 0
    for job in jobs:
        try:
            contexts.append((job, context_of(job, settings.cluster)))
        except InputError:
            never_ran += 1  # cancelled or failed before it had nodes: nothing to attribute
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    with open_store(ctx, settings=settings) as engine:
        stored: dict[str, dict] = {}
        for cluster in sorted({c.cluster for _, c in contexts}):
            stored[cluster] = stored_job_starts(engine, cluster, [c.job_id for _, c in contexts if c.cluster == cluster])
        todo = [(j, c) for j, c in contexts if redo or not is_stored(stored[c.cluster], c.job_id, c.start)]
        skipped = len(contexts) - len(todo)
        click.echo(f"{len(jobs)} failed job(s) ended between {since_t:%Y-%m-%dT%H:%M:%SZ} and "
                   f"{until_t:%Y-%m-%dT%H:%M:%SZ}: {skipped} already stored, {never_ran} never ran, "
                   f"{len(todo)} to diagnose", err=True)
        with click.progressbar(todo, label="backfill", file=sys.stderr,
                               item_show_func=lambda x: x[0].display_id if x else None) as bar:
            for job, c in bar:
                try:
                    d = diagnose_sacct_job(rs, settings.connectors, job, c.cluster, keep=True)
                except InputError as exc:
                    failures.append(f"job {job.display_id}: {exc}")
                    continue
                _, verdict = ingest_diagnosis(rs, engine, d, source="sacct")  # with what is kept for replay
                outcomes[verdict.outcome if verdict else "attributed by another process"] += 1
    for f in failures:
        click.echo(f"attribution: {f}", err=True)
    done = sum(outcomes.values())
    summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    click.echo(f"stored {done} verdict(s)" + (f": {summary}" if summary else "") + f"; skipped {skipped} already "
               f"stored" + (f"; {len(failures)} failed" if failures else ""))
