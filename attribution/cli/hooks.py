"""`attribution epilog` (what hooks/epilog-slurmctld runs on the controller) and `attribution spool ...`.

The controller's epilog is a full engine on a trusted host: it reads the job's final state and output, writes
the observation document to the controller's spool and delivers the spool through the one intake, into the
database or to the service (pipeline/controller.py). It never fails: whatever happens it prints one line saying
what it did and exits 0. On a compute node the hooks run the node collector (`attribution-node`); `attribution
epilog` there hands over to it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from attribution.cli import main, ruleset_of, settings_of


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--budget", type=float, default=None, help="Seconds this run may take (default: epilog.budget_seconds).")
@click.option("--scontrol-output", type=click.Path(path_type=Path), default=None,
              help="`scontrol show job -o` output the controller hook already fetched (saves a second RPC).")
@click.option("--started", type=float, default=None,
              help="Epoch seconds when the hook started this run: the budget counts from then.")
@click.argument("node_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def epilog(ctx: click.Context, budget: float | None, scontrol_output: Path | None, started: float | None,
           node_args: tuple[str, ...]) -> None:
    """The entry point the Slurm controller's hook calls; reads the Slurm environment. Always exits 0. On a
    compute node (SLURMD_NODENAME set) it runs the node collector, attribution-node epilog, with the same
    options."""
    if os.environ.get("SLURMD_NODENAME") and os.environ.get("SLURM_SCRIPT_CONTEXT") != "epilog_slurmctld":
        from attribution.node.agent import main as node_main

        argv = ["epilog"] + [x for flag, v in (("--budget", budget), ("--started", started)) if v is not None
                             for x in (flag, str(v))] + list(node_args)
        node_main(argv)
        sys.exit(0)
    t0 = time.monotonic()
    if started is not None:  # the time Python took to start counts against the budget
        t0 -= max(0.0, min(time.time() - started, 60.0))
    try:
        click.echo(f"attribution epilog: {run_controller(ctx, budget, scontrol_output, t0)}")
    except Exception as exc:  # never let the hook fail
        click.echo(f"attribution epilog: error: {type(exc).__name__}: {exc} ({time.monotonic() - t0:.3f}s)",
                   err=True)
    sys.exit(0)


def run_controller(ctx: click.Context, budget: float | None, scontrol_output: Path | None, t0: float) -> str:
    """One controller hook run; its log line."""
    from attribution.node import spool
    from attribution.pipeline.controller import controller_document, deliver, final_info
    from attribution.scope.scontrol import read_show_job
    from attribution.scope.slurm import parse_env

    settings = settings_of(ctx)
    budget = budget or settings.epilog.budget_seconds
    deadline = t0 + max(1.0, budget - max(2.5, 0.15 * budget))
    env = parse_env(os.environ)
    rs = ruleset_of(ctx)
    # scontrol prints what users named things (job names, comments): any bytes (issue 18, L4)
    info = final_info(env.job_id, read_show_job(scontrol_output) if scontrol_output else None, env.failed)
    doc, skipped = controller_document(rs, settings, os.environ, info)
    parts = [f"controller job {env.job_id}"]
    if doc is None:
        parts.append(f"skipped: {skipped}")
    else:
        parts.append(f"{len(doc['observations'])} observation(s)")
        path = spool.write(Path(settings.spool), doc)
        try:
            res = deliver(rs, settings, lambda: _engine(ctx, settings, deadline), deadline)
        except Exception as exc:  # the database or the service is away: kept for the spool timer
            parts += [f"spooled to {path}", f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
        else:
            if path.exists():
                parts.append(f"spooled to {path}")
                if res.error or res.locked_out:
                    parts.append(f"error: {res.error or 'another flush holds the spool'}")
            elif any(b.startswith(path.name + ":") for b in res.bad):
                parts.append("refused")
            else:
                parts.append("stored" + (" through the service" if settings.service_url else ""))
                if not settings.service_url:  # job_actions: the service acts on the jobs reported to it
                    from attribution.pipeline.jobactions import after_epilog

                    parts += after_epilog(rs, settings, lambda: _engine(ctx, settings, deadline), doc, info, deadline)
                if res.replayed > 1:
                    parts.append(f"replayed {res.replayed - 1} spooled")
            parts += [f"set aside: {b}" for b in res.bad]
    parts.append(f"{time.monotonic() - t0:.3f}s")
    return "; ".join(parts)


def _engine(ctx: click.Context, settings, deadline: float):
    """The database, with connect and statement timeouts that fit the hook's remaining budget."""
    from dataclasses import replace

    from attribution.cli.db import open_store

    remaining = max(1.0, deadline - time.monotonic())
    db = settings.database
    s = replace(settings, database=replace(db, connect_timeout=min(db.connect_timeout, remaining / 2),
                                           statement_timeout_ms=int(min(db.statement_timeout_ms, remaining * 1000))))
    return open_store(ctx, settings=s, pool_size=1, application_name="attribution-epilog", deadline=deadline)


@main.group("spool")
def spool_group() -> None:
    """The controller's spool: its reports waiting for the database or the service (a compute node's spool is
    attribution-node spool)."""


@spool_group.command("flush")
@click.option("--wait/--no-wait", default=True, help="Wait for another flush to finish instead of skipping.")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds (files left stay spooled).")
@click.pass_context
def spool_flush(ctx: click.Context, wait: bool, timeout: float | None) -> None:
    """Deliver every spooled report once (safe to run any number of times, e.g. from a systemd timer): into the
    database, or to the service when service_url is set. Exits 3 when reports are left."""
    from attribution.node import spool
    from attribution.pipeline.controller import deliver

    settings = settings_of(ctx)
    folder = Path(settings.spool)
    if not spool.pending(folder):
        click.echo(f"{folder}: nothing to deliver")
        return
    deadline = time.monotonic() + timeout if timeout else None
    from attribution.cli.db import open_store

    res = deliver(ruleset_of(ctx), settings, lambda: open_store(ctx), deadline, wait=wait)
    click.echo(f"{folder}: delivered {res.replayed}, left {res.left}, bad {len(res.bad)}"
               + (f"; stopped: {res.error}" if res.error else "")
               + ("; another flush holds the lock" if res.locked_out else ""))
    for b in res.bad:
        click.echo(f"  bad: {b}", err=True)
    if res.error or res.left:
        sys.exit(3)


@spool_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: spool, pending, bad.")
@click.pass_context
def spool_status(ctx: click.Context, as_json: bool) -> None:
    """How many reports wait in the controller's spool, and how many were set aside."""
    import json

    from attribution.node import spool

    folder = Path(settings_of(ctx).spool)
    bad = list((folder / "bad").glob("*.spool")) if (folder / "bad").is_dir() else []
    pending = len(spool.pending(folder))
    if as_json:
        click.echo(json.dumps({"spool": str(folder), "pending": pending, "bad": len(bad)}, indent=2))
        return
    click.echo(f"{folder}: {pending} pending, {len(bad)} bad")
