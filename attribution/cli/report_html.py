"""`attribution report job` and `attribution report fleet`: the HTML pages over the store.

(attribution/cli/report.py holds the demo's text tables; it registers no command.)
"""

from __future__ import annotations

from pathlib import Path

import click

from attribution.cli import main
from attribution.cli.db import open_store


@main.group("report")
def report_group() -> None:
    """HTML reports over the store: a job's timeline, the fleet report."""


@report_group.command("job")
@click.argument("cluster")
@click.argument("job_id")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="The HTML file to write (one self-contained page).")
@click.option("--start", default=None,
              help="The job's start time when its id was used more than once (default: the newest).")
@click.pass_context
def report_job(ctx: click.Context, cluster: str, job_id: str, out: Path, start: str | None) -> None:
    """The timeline of a stored job, from its current verdict and its events."""
    from attribution.store.reports import stored_job
    from attribution.reports.timeline import write_document_timeline
    from attribution.cli.times import when

    started = when("--start", start)
    with open_store(ctx) as engine:
        job = stored_job(engine, cluster, job_id, started)
    write_document_timeline(job.document, job.events, out)
    if len(job.starts) > 1 and started is None:
        click.echo(f"note: {len(job.starts)} jobs {cluster}/{job_id} are stored; this is the newest "
                   f"(use --start to pick another)", err=True)
    click.echo(f"{out}: {cluster}/{job_id} {job.document.get('outcome')}")


@report_group.command("fleet")
@click.option("--weeks", type=click.IntRange(min=1), default=8, show_default=True,
              help="ISO weeks to cover, the current one included.")
@click.option("--out", "out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Folder to write the report into (index.html).")
@click.option("--until", default=None, help="Cover the weeks up to the one holding this day (default: today).")
@click.pass_context
def report_fleet(ctx: click.Context, weeks: int, out: Path, until: str | None) -> None:
    """A static HTML report over the fleet views: failures, faults, recurring nodes and GPUs, drain candidates,
    GPU-hours lost."""
    from attribution.reports.fleet import write_fleet_report
    from attribution.cli.times import when

    end = when("--until", until)
    with open_store(ctx) as engine:
        path = write_fleet_report(engine, out, weeks=weeks, until=end)
    click.echo(str(path))
