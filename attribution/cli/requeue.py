"""`attribution requeue plan|apply|log`: failed jobs put back in the queue without their culprit nodes
(rules/requeue-policy.yaml, docs/job-actions.md)."""

from __future__ import annotations

import json

import click

from attribution.cli import main, ruleset_of, settings_of
from attribution.cli.db import open_store


def _slurm(ctx, scontrol: str | None):
    from dataclasses import replace

    from attribution.act.slurmjob import from_settings

    s = from_settings(settings_of(ctx).job_actions)
    return replace(s, scontrol=scontrol) if scontrol else s


@main.group()
def requeue() -> None:
    """Requeue failed jobs that allow it without their culprit nodes, within the caps (rules/requeue-policy.yaml)."""


@requeue.command("plan")
@click.option("--cluster", default=None, help="Only this cluster.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def requeue_plan(ctx: click.Context, cluster: str | None, as_json: bool) -> None:
    """The recently failed jobs the policy would requeue, from the store (Slurm is asked at apply: whether the
    job allows requeue, whether it runs again)."""
    from attribution.pipeline.jobactions import requeue_plan as plan

    rs = ruleset_of(ctx)
    with open_store(ctx) as engine:
        rows = plan(rs, engine, cluster)
    if as_json:
        click.echo(json.dumps([{"cluster": cl, "job_id": j, "start": s.isoformat(), "decision": d.decision,
                                "detail": d.detail, "cause": d.cause, "exclude": list(d.exclude),
                                "user": (doc.get("job") or {}).get("user"), "outcome": doc.get("outcome")}
                               for cl, j, s, doc, d in rows], indent=2))
        return
    if not rows:
        click.echo("no job to requeue")
    for cl, j, _, doc, d in rows:
        click.echo(f"{d.decision:<8} {cl}/{j:<10} {doc.get('outcome'):<15} without {','.join(d.exclude):<20} "
                   f"{d.cause}" + ("" if d.decision == "requeue" else f"  -- {d.detail}"))


@requeue.command("apply")
@click.option("--cluster", default=None, help="The Slurm cluster (default: config `cluster`, else Slurm's).")
@click.option("--scontrol", default=None, help="scontrol to use (default: job_actions.scontrol).")
@click.option("--dry-run", is_flag=True, help="Decide and print, but requeue nothing and record nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def requeue_apply(ctx: click.Context, cluster: str | None, scontrol: str | None, dry_run: bool,
                  as_json: bool) -> None:
    """Requeue the planned jobs through scontrol (requeuehold, ExcNodeList, release), each checked again against
    what Slurm says of it now, within the caps; every decision is audited. With job_actions.admin_comment the
    job's AdminComment says why it runs again."""
    from attribution.cli.drain import _actor
    from attribution.pipeline.jobactions import requeue_apply as apply

    settings = settings_of(ctx)
    slurm = _slurm(ctx, scontrol)
    cluster = cluster or settings.cluster or slurm.cluster_name()
    if not cluster:
        raise click.UsageError("no cluster name: pass --cluster or set `cluster` in the configuration")
    with open_store(ctx) as engine:
        rows = apply(ruleset_of(ctx), engine, slurm, cluster, settings.job_actions.admin_comment, _actor(),
                     dry_run=dry_run)
    if as_json:
        click.echo(json.dumps([{"cluster": cluster, "job_id": j, "decision": word, "detail": detail,
                                "cause": d.cause, "exclude": list(d.exclude)} for j, word, detail, d in rows],
                              indent=2))
        return
    if not rows:
        click.echo("no job to requeue")
    for j, word, detail, d in rows:
        click.echo(f"{word:<13} {cluster}/{j:<10} without {','.join(d.exclude):<20} {d.cause}  -- {detail}")


@requeue.command("log")
@click.option("--cluster", default=None)
@click.option("--limit", default=50, show_default=True)
@click.pass_context
def requeue_log(ctx: click.Context, cluster: str | None, limit: int) -> None:
    """The audit of what was done to jobs (requeues, AdminComments), newest first."""
    from attribution.store.jobactions import actions

    with open_store(ctx) as engine:
        for a in actions(engine, cluster, limit):
            nodes = f" without {','.join(a['nodes'])}" if a["nodes"] else ""
            click.echo(f"{a['at']:%Y-%m-%d %H:%M:%S}  {a['action']:<13} {a['decision']:<8} "
                       f"{a['cluster']}/{a['job_id']}{nodes}  {a['cause'] or ''}  {a['detail'] or ''}")
