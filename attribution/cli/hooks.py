"""`attribution epilog` (what hooks/epilog and hooks/epilog-slurmctld run) and `attribution spool ...`.

The work is the node agent's (attribution/node/agent.py); `attribution` hands these commands to it before click is
even imported (attribution/entry.py). These click commands are the same entry points inside the command tree
(`python -m attribution.cli`, tests). `epilog` never fails: whatever happens it prints one line saying what it did
and exits 0, so that a Slurm epilog calling it can never drain a node because of us.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from attribution.cli import main
from attribution.node import agent
from attribution.node.agent import KERNEL_SOURCES


def _globals(ctx: click.Context) -> tuple:
    obj = ctx.find_root().obj
    return obj.get("config_path"), obj.get("rules_dir")


class _Echo:
    """click.echo as a file, so the agent's lines reach click's (and CliRunner's) streams."""

    def __init__(self, err: bool) -> None:
        self.err = err

    def write(self, text: str) -> None:
        click.echo(text, nl=False, err=self.err)

    def flush(self) -> None:
        pass


@main.command()
@click.option("--budget", type=float, default=None, help="Seconds this run may take (default: epilog.budget_seconds).")
@click.option("--kernel-source", type=click.Choice(KERNEL_SOURCES), default=None)
@click.option("--kernel-file", type=click.Path(path_type=Path), default=None,
              help="Kernel log file to read when the kernel source is 'file' (e.g. /var/log/kern.log).")
@click.option("--fabricmanager-log", type=click.Path(path_type=Path), default=None)
@click.option("--scontrol-output", type=click.Path(path_type=Path), default=None,
              help="`scontrol show job -o` output the controller hook already fetched (saves a second RPC).")
@click.option("--started", type=float, default=None,
              help="Epoch seconds when the hook started this run: the budget counts from then.")
@click.option("--telemetry", "telemetry_dir", type=click.Path(path_type=Path), default=None,
              help="The folder holding the hooks' counter snapshots (prolog/ and epilog/).")
@click.option("--state-dir", type=click.Path(path_type=Path), default=None,
              help="The hooks' state folder holding the prolog's start stamp (default: epilog.state_dir).")
@click.pass_context
def epilog(ctx: click.Context, budget: float | None, kernel_source: str | None, kernel_file: Path | None,
           fabricmanager_log: Path | None, scontrol_output: Path | None, started: float | None,
           telemetry_dir: Path | None, state_dir: Path | None) -> None:
    """The entry point the Slurm hooks call; reads the Slurm environment. Always exits 0."""
    config_path, rules_dir = _globals(ctx)
    agent.run_epilog(config_path, rules_dir, budget=budget, kernel_source=kernel_source,
                     kernel_file=str(kernel_file) if kernel_file else None,
                     fabricmanager_log=str(fabricmanager_log) if fabricmanager_log else None,
                     scontrol_output=str(scontrol_output) if scontrol_output else None, started=started,
                     telemetry_dir=str(telemetry_dir) if telemetry_dir else None,
                     state_dir=str(state_dir) if state_dir else None, out=_Echo(False), err=_Echo(True))
    sys.exit(0)


@main.command("nvml-snapshot")
@click.argument("file", type=click.Path(path_type=Path))
def nvml_snapshot(file: Path) -> None:
    """The GPU counters through NVML (nvidia-ml-py, when installed) into FILE, for the hooks' snapshots
    (ATTRIBUTION_GPU_TOOL=nvml). Always exits 0: without NVML the file says why (a coverage gap)."""
    agent.nvml_snapshot(str(file), err=_Echo(True))
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
    config_path, rules_dir = _globals(ctx)
    rc = agent.spool_flush(config_path, rules_dir, wait=wait, timeout=timeout)
    if rc:
        sys.exit(rc)


@spool_group.command("status")
@click.pass_context
def spool_status(ctx: click.Context) -> None:
    """How many payloads wait in the spool."""
    agent.spool_status(_globals(ctx)[0])
