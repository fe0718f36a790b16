"""`attribution drain plan|apply|resume|sync-nodes|log|backtest`: nodes with real hardware faults out of the
scheduler, safely."""

from __future__ import annotations

import json
import os
import pwd
from datetime import datetime, timezone
from pathlib import Path

import click

from attribution.cli import main, ruleset_of, settings_of
from attribution.cli.db import open_store
from attribution.cli.times import when

UTC = timezone.utc


def _policy(ctx):
    from attribution.drain.policy import load_policy

    return load_policy(ruleset_of(ctx))  # a PolicyError is a RulePackError: its problems, exit 2


def _controller(ctx, scontrol: str):
    """scontrol, or slurmrestd when connectors.slurmrestd.url is configured."""
    from attribution.drain.slurmrest import controller

    return controller(settings_of(ctx).connectors, scontrol)


def _cluster(ctx, sc, cluster: str | None) -> str:
    cluster = cluster or settings_of(ctx).cluster or sc.cluster_name()
    if not cluster:
        raise click.UsageError("no cluster name: pass --cluster or set `cluster` in the configuration")
    return cluster


def _actor() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


@main.group()
def drain() -> None:
    """Decide which nodes to drain from the stored history (rules/drain-policy.yaml), and act on it."""


@drain.command("plan")
@click.option("--cluster", default=None, help="Only this cluster.")
@click.option("--as-of", "as_of", default=None,
              help="The plan as it would have been at this time, from the evidence of up to then (docs/replay.md).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def drain_plan(ctx: click.Context, cluster: str | None, as_of: str | None, as_json: bool) -> None:
    """The nodes the policy would drain now (or at --as-of), with a reason fit for Slurm and the evidence."""
    from attribution.pipeline.drain import drain_plan

    policy = _policy(ctx)
    with open_store(ctx) as engine:
        if as_of is not None:
            from attribution.store.backtest import plan_as_of

            cands = plan_as_of(engine, policy, when("--as-of", as_of), cluster)
        else:
            cands = drain_plan(engine, policy, cluster)
    if as_json:
        click.echo(json.dumps([{"cluster": c.cluster, "node": c.node, "reason": c.reason, "score": c.score,
                                "evidence": c.evidence} for c in cands], indent=2, default=str))
        return
    if not cands:
        click.echo("no node to drain")
    for c in cands:
        jobs = sorted({j["job_id"] for e in c.evidence for j in e.get("jobs", [])})
        click.echo(f"{c.cluster}/{c.node:<16} score {c.score:>5.0f}  {c.reason}"
                   + (f"  (jobs {', '.join(jobs[:5])}{' ...' if len(jobs) > 5 else ''})" if jobs else ""))


@drain.command("apply")
@click.option("--cluster", default=None, help="The Slurm cluster (default: config `cluster`, else Slurm's).")
@click.option("--scontrol", default="/usr/bin/scontrol", show_default=True,
              help="Unused when connectors.slurmrestd.url is set (drains then go through slurmrestd).")
@click.option("--dry-run", is_flag=True, help="Decide and print, but drain nothing and record nothing.")
@click.pass_context
def drain_apply(ctx: click.Context, cluster: str | None, scontrol: str, dry_run: bool) -> None:
    """Drain the planned nodes through scontrol (or slurmrestd), within the policy's safety caps; every decision is
    audited."""
    from attribution.pipeline.drain import drain_apply as apply

    policy = _policy(ctx)
    sc = _controller(ctx, scontrol)
    cluster = _cluster(ctx, sc, cluster)
    with open_store(ctx) as engine:
        rows = apply(engine, policy, sc, cluster, _actor(), dry_run=dry_run)
    for d, word, detail in rows:
        click.echo(f"{word:<11} {cluster}/{d.candidate.node:<16} {d.candidate.reason}"
                   + ("" if word == "applied" else f"  -- {detail}"))
    if not rows:
        click.echo("no node to drain")


@drain.command("resume")
@click.argument("node")
@click.option("--cluster", default=None)
@click.option("--scontrol", default="/usr/bin/scontrol", show_default=True,
              help="Unused when connectors.slurmrestd.url is set.")
@click.pass_context
def drain_resume(ctx: click.Context, node: str, cluster: str | None, scontrol: str) -> None:
    """Give a node back: resume it in Slurm and mark its earlier evidence as handled."""
    from attribution.pipeline.drain import drain_resume as resume

    sc = _controller(ctx, scontrol)
    cluster = _cluster(ctx, sc, cluster)
    n = resume(lambda: open_store(ctx), sc, cluster, node, _actor())
    click.echo(f"{cluster}/{node}: resumed; {n} earlier event(s) marked handled")


@drain.command("sync-nodes")
@click.option("--cluster", default=None, help="The Slurm cluster (default: config `cluster`, else Slurm's).")
@click.option("--scontrol", default="/usr/bin/scontrol", show_default=True,
              help="Unused when connectors.slurmrestd.url is set (the nodes are then read through slurmrestd).")
@click.pass_context
def drain_sync_nodes(ctx: click.Context, cluster: str | None, scontrol: str) -> None:
    """Record Slurm's view of the nodes in their life: a new BootTime is a boot, a DRAIN set is a drain (who set it
    and when), a DRAIN lifted is a resume (scontrol, a RebootProgram, NHC): the one-shot drain conditions then
    count only what came after. Run by the drain host's timer (hooks/systemd/attribution-drain-sync.timer)."""
    from attribution.pipeline.drain import drain_sync

    sc = _controller(ctx, scontrol)
    cluster = _cluster(ctx, sc, cluster)
    nodes = sc.nodes()
    with open_store(ctx) as engine:
        changes = drain_sync(engine, cluster, nodes)
    for c in changes:
        click.echo(f"{c.at:%Y-%m-%d %H:%M:%S}Z  {c.what:<7} {cluster}/{c.node:<16}"
                   + (f" by {c.actor}" if c.actor else "") + (f"  {c.detail}" if c.detail else ""))
    click.echo(f"{cluster}: {len(nodes)} node(s) seen, {len(changes)} change(s) recorded")


@drain.command("log")
@click.option("--cluster", default=None)
@click.option("--limit", default=50, show_default=True)
@click.pass_context
def drain_log(ctx: click.Context, cluster: str | None, limit: int) -> None:
    """The audit of drain decisions, newest first."""
    from attribution.store import drain as sd

    with open_store(ctx) as engine:
        for a in sd.actions(engine, cluster, limit):
            click.echo(f"{a['at']:%Y-%m-%d %H:%M:%S}  {a['decision']:<8} {a['cluster']}/{a['node']:<16} "
                       f"{a['reason'] or ''}  {a['detail'] or ''}")


def _policy_file(ctx: click.Context, path: Path | None):
    """The drain policy of a file (drain-policy.yaml's format), checked with the rule pack in use; or the pack's."""
    import shutil
    import tempfile

    from attribution.drain.policy import PolicyError, load_policy
    from attribution.errors import InputError
    from attribution.rulepack.load import load_rules

    base = ruleset_of(ctx)
    try:
        if path is None:
            return load_policy(base)
        if not path.is_file():
            raise InputError(str(path), "no such policy file")
        with tempfile.TemporaryDirectory(prefix="attribution-policy-") as tmp:
            pack = Path(tmp) / "rules"
            shutil.copytree(base.root, pack)
            for old in pack.rglob("*.yaml"):
                if "type: drain_policy" in old.read_text(encoding="utf-8"):
                    old.unlink()
            shutil.copy(path, pack / "drain-policy.yaml")
            return load_policy(load_rules(pack))
    except PolicyError as exc:
        raise InputError(str(path or "drain policy"), "; ".join(exc.problems)) from None


@drain.command("backtest")
@click.option("--policy", "policies", multiple=True, type=click.Path(path_type=Path),
              help="A drain policy file (drain-policy.yaml's format); twice to compare two side by side "
                   "(default: the rule pack's).")
@click.option("--since", required=True, help="Start of the period (ISO 8601 or now-30d, ...).")
@click.option("--until", default=None, help="End of the period (default: now).")
@click.option("--cluster", default=None, help="Only this cluster.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def drain_backtest(ctx: click.Context, policies, since: str, until: str | None, cluster: str | None,
                   as_json: bool) -> None:
    """Replay drain policies over a past period: when each node would have been drained, the later failed jobs
    (and GPU-hours) on it that would have been prevented, the node-hours it would have cost."""
    from attribution.errors import InputError
    from attribution.store.backtest import backtest, render_text

    t1 = when("--since", since)
    t2 = when("--until", until) or datetime.now(UTC)
    if t2 <= t1:
        raise InputError("--until", "must be after --since")
    chosen = [(str(p), _policy_file(ctx, p)) for p in policies] or [("rules", _policy_file(ctx, None))]
    with open_store(ctx) as engine:
        results = backtest(engine, chosen, t1, t2, cluster)
    if as_json:
        click.echo(json.dumps({"since": t1.isoformat(), "until": t2.isoformat(),
                               "policies": [b.to_dict() for b in results]}, indent=2))
    else:
        click.echo(render_text(results))
