"""`attribution epilog` (what hooks/epilog and hooks/epilog-slurmctld run) and `attribution spool ...`.

`epilog` never fails: whatever happens it prints one line saying what it did and exits 0, so that a Slurm
epilog calling it can never drain a node because of us.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from attribution.cli import main, ruleset_of, settings_of


def _engine_factory(settings, deadline: float):
    """A context manager giving an engine whose connect and statement timeouts fit the hook's remaining budget."""
    def make():
        from dataclasses import replace

        from attribution.cli.db import open_store

        remaining = max(1.0, deadline - time.monotonic())
        db = replace(settings.database, connect_timeout=min(settings.database.connect_timeout, remaining / 2),
                     statement_timeout_ms=int(min(settings.database.statement_timeout_ms, remaining * 1000)))
        return open_store(None, settings=replace(settings, database=db), pool_size=1,
                          application_name="attribution-epilog", deadline=deadline)
    return make


@main.command()
@click.option("--budget", type=float, default=None, help="Seconds this run may take (default: epilog.budget_seconds).")
@click.option("--kernel-source", type=click.Choice(["auto", "journald", "dmesg", "file"]), default=None)
@click.option("--kernel-file", type=click.Path(path_type=Path), default=None,
              help="Kernel log file to read when the kernel source is 'file' (e.g. /var/log/kern.log).")
@click.option("--fabricmanager-log", type=click.Path(path_type=Path), default=None)
@click.option("--scontrol-output", type=click.Path(path_type=Path), default=None,
              help="`scontrol show job -o` output the controller hook already fetched (saves a second RPC).")
@click.option("--started", type=float, default=None,
              help="Epoch seconds when the hook started this run: the budget counts from then.")
@click.option("--telemetry", "telemetry_dir", type=click.Path(path_type=Path), default=None,
              help="The folder holding the hooks' counter snapshots (prolog/ and epilog/).")
@click.pass_context
def epilog(ctx: click.Context, budget: float | None, kernel_source: str | None, kernel_file: Path | None,
           fabricmanager_log: Path | None, scontrol_output: Path | None, started: float | None,
           telemetry_dir: Path | None) -> None:
    """The entry point the Slurm hooks call; reads the Slurm environment. Always exits 0."""
    t0 = time.monotonic()
    if started is not None:  # the time Python took to start counts against the budget
        t0 -= max(0.0, min(time.time() - started, 60.0))
    try:
        from dataclasses import replace

        from attribution.node import epilog as hook
        from attribution.scope.slurm import parse_env, parse_scontrol_job

        settings = settings_of(ctx)
        ep = settings.epilog
        ep = replace(ep, budget_seconds=budget or ep.budget_seconds,
                     kernel_source=kernel_source or ("file" if kernel_file else ep.kernel_source),
                     kernel_file=str(kernel_file) if kernel_file else ep.kernel_file,
                     fabricmanager_log=str(fabricmanager_log) if fabricmanager_log else ep.fabricmanager_log)
        settings = replace(settings, epilog=ep)
        # stop storing with a margin (a last connect attempt may take 2 s) for writing the spool before the
        # hook's `timeout` kills this process
        deadline = t0 + max(1.0, ep.budget_seconds - max(2.5, 0.15 * ep.budget_seconds))
        env = parse_env(os.environ)
        rs = ruleset_of(ctx)
        factory = _engine_factory(settings, deadline)
        if env.is_controller:
            info = None
            if scontrol_output:
                try:
                    # scontrol prints what users named things (job names, comments): any bytes (issue 18, L4)
                    info = parse_scontrol_job(scontrol_output.read_bytes()[:1 << 20].decode("utf-8", "replace"))
                except OSError:
                    info = None
            report = hook.run_controller(rs, settings, env, factory, deadline, info=info)
        else:
            report = hook.run_node(rs, settings, env, factory, deadline, telemetry_dir=telemetry_dir)
        click.echo(f"attribution epilog: {report.line()}")
    except Exception as exc:  # never let the hook fail
        click.echo(f"attribution epilog: error: {type(exc).__name__}: {exc} ({time.monotonic() - t0:.3f}s)",
                   err=True)
    sys.exit(0)


@main.group("spool")
def spool_group() -> None:
    """The local spool of observations waiting for the database."""


@spool_group.command("flush")
@click.option("--wait/--no-wait", default=True, help="Wait for another flush to finish instead of skipping.")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds (files left stay spooled).")
@click.pass_context
def spool_flush(ctx: click.Context, wait: bool, timeout: float | None) -> None:
    """Store every spooled payload once (safe to run any number of times, e.g. from a systemd timer): in the
    database, or through the Attribution Service when service_url is set."""
    from attribution.node import spool
    from attribution.node.epilog import replay, replay_to_service
    from attribution.cli.db import open_store

    settings = settings_of(ctx)
    rs = None if settings.service_url else ruleset_of(ctx)
    deadline = time.monotonic() + timeout if timeout else None
    if not spool.pending(settings.spool):
        click.echo(f"{settings.spool}: nothing to replay")
        return
    if settings.service_url:
        from attribution.node.service_client import client_from_settings

        with client_from_settings(settings) as client:
            res = spool.flush(settings.spool, lambda d: replay_to_service(client, d, deadline),
                              deadline=deadline, wait_for_lock=wait)
    else:
        with open_store(ctx) as engine:
            res = spool.flush(settings.spool, lambda d: replay(rs, engine, d, deadline), deadline=deadline,
                              wait_for_lock=wait)
    click.echo(f"{settings.spool}: replayed {res.replayed}, left {res.left}, bad {len(res.bad)}"
               + (f"; stopped: {res.error}" if res.error else "") + ("; another flush holds the lock"
                                                                     if res.locked_out else ""))
    for b in res.bad:
        click.echo(f"  bad: {b}", err=True)
    if res.error or res.left:
        sys.exit(3)


@spool_group.command("status")
@click.pass_context
def spool_status(ctx: click.Context) -> None:
    """How many payloads wait in the spool."""
    from attribution.node import spool

    settings = settings_of(ctx)
    files = spool.pending(settings.spool)
    bad = list((settings.spool / "bad").glob("*.spool")) if (settings.spool / "bad").is_dir() else []
    click.echo(f"{settings.spool}: {len(files)} pending, {len(bad)} bad")
