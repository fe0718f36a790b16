"""Looking things up from the terminal: `attribution jobs`, `attribution show CLUSTER JOB`, `attribution node NODE`.

The same reads the dashboard and GET /v1/jobs, /v1/nodes answer from (attribution.store.browse); `--json` prints
what those endpoints return. Times take ISO 8601 or relative forms (`now-7d`, `yesterday`: timeparse.parse_when).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import click

from attribution.cli import main
from attribution.cli.db import open_store
from attribution.cli.columns import table
from attribution.cli.times import FORMS, when
from attribution.model import OUTCOMES as VERDICT_OUTCOMES

UTC = timezone.utc
OUTCOMES = ("failed",) + VERDICT_OUTCOMES


JOB_COLUMNS = ("cluster", "job", "ended", "state", "outcome", "root cause", "culprits")
#: the widest each column but the last (culprits) may be: a longer value is cut with `…`
JOB_CAPS = (20, 20, 20, 20, 15, 48)


def _short(value: str | None) -> str:
    return "" if not value else value.replace("T", " ")[:19] + "Z"


@main.command("jobs")
@click.option("--cluster", default=None, help="Only this cluster's jobs.")
@click.option("--since", default=None,
              help=f"Jobs that ended (or started, while running) from this time: {FORMS}")
@click.option("--until", default=None, help="... and before this time.")
@click.option("--outcome", type=click.Choice(OUTCOMES), default=None,
              help="Only this outcome; `failed` is every outcome but none.")
@click.option("--node", default=None, help="Only jobs that ran on this node.")
@click.option("--user", default=None, help="Only this user's jobs.")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the jobs, and whether there are more (docs/cli.md).")
@click.pass_context
def jobs(ctx: click.Context, cluster, since, until, outcome, node, user, limit, as_json) -> None:
    """Stored jobs with their current verdict, newest first."""
    from attribution.store import browse

    now = datetime.now(UTC)
    where = browse.JobFilter(cluster=cluster, outcome=outcome, node=node, user=user,
                             since=when("--since", since, now), until=when("--until", until, now))
    with open_store(ctx) as engine, engine.connect() as conn:
        rows, nxt = browse.list_jobs(conn, where, limit)
    if as_json:
        click.echo(json.dumps({"jobs": rows, "more": nxt is not None}, indent=2))
        return
    if not rows:
        click.echo("no job matches", err=True)
        return
    cells = []
    for r in rows:
        root = (r["root_kind"] or "-") + (f" {r['root_code']}" if r["root_code"] is not None else "")
        root += f" @{r['root_node']}" if r["root_node"] else ""
        cells.append([r["cluster"], r["job_id"], _short(r["job_time"]), r["state"] or "-",
                      r["outcome"] or "not attributed", root, ",".join(r["culprit_nodes"] or []) or "-"])
    for line in table(JOB_COLUMNS, cells, JOB_CAPS):
        click.echo(line)
    if nxt is not None:
        click.echo(f"(more than {limit}; narrow the filters or raise --limit)", err=True)


@main.command("show")
@click.argument("cluster")
@click.argument("job_id")
@click.option("--start", default=None, help="The job's start time when its id was used more than once.")
@click.option("--json", "as_json", is_flag=True, help="The verdict document (docs/verdict.md).")
@click.pass_context
def show(ctx: click.Context, cluster: str, job_id: str, start: str | None, as_json: bool) -> None:
    """A stored job's current verdict: what broke, where, what to do."""
    from attribution.reports.render import render_document_text
    from attribution.store import reads

    started = when("--start", start, datetime.now(UTC))
    with open_store(ctx) as engine, engine.connect() as conn:
        doc = reads.current_verdict(conn, cluster, job_id, started)
    if doc is None:
        from attribution.errors import InputError

        raise InputError(f"{cluster}/{job_id}", "no job with a verdict in the store")
    click.echo(json.dumps(doc, indent=2) if as_json else render_document_text(doc))


@main.command("node")
@click.argument("node")
@click.option("--cluster", default=None, help="The node's cluster (needed when two clusters have this name).")
@click.option("--days", type=click.IntRange(1, 3660), default=91, show_default=True, help="How far back.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object, as GET /v1/nodes/{cluster}/{node}.")
@click.pass_context
def node(ctx: click.Context, node: str, cluster: str | None, days: int, as_json: bool) -> None:
    """A node's history: recurring faults, fault events, failed jobs it ran, drains and resumes."""
    from attribution.errors import InputError
    from attribution.store import browse

    with open_store(ctx) as engine, engine.connect() as conn:
        found = browse.node_clusters(conn, node) if cluster is None else [cluster]
        if not found:
            raise InputError(node, "no job in the store ran on this node")
        if len(found) > 1:
            raise InputError(node, f"the node name is in several clusters ({', '.join(found)}): give --cluster")
        h = browse.node_history(conn, found[0], node, datetime.now(UTC), days)
    if as_json:
        click.echo(json.dumps(h, indent=2))
        return
    cand = h["drain_candidate"]
    click.echo(f"{h['cluster']}/{node} since {_short(h['since'])}: "
               + (f"drain candidate (score {cand['score']}): {cand['reason']}" if cand else "not a drain candidate")
               + (f"; {h['drain_summary']}" if h["drain_summary"] and not cand else "")
               + (f"; last resumed {_short(h['resumed_at'])}" if h["resumed_at"] else ""))
    click.echo("\n== drain conditions (nearest first)")
    for p in h["drain_conditions"]:
        click.echo(f"  {p['text']}" + ("  [recurrence]" if p["recurrence"] else ""))
    if not h["drain_conditions"]:
        click.echo("  no drain policy loaded yet (attribution drain plan loads it)")
    click.echo("\n== life (boots, drains, resumes)")
    for r in h["life"]:
        click.echo(f"  {_short(r['at'])}  {r['what']:<7} {', '.join(r['sources'])}"
                   + (f" by {r['actor']}" if r["actor"] else "") + (f"  {r['detail']}" if r["detail"] else ""))
    if not h["life"]:
        click.echo("  nothing recorded")
    s = h["slurm_state"]
    if s:
        click.echo(f"  Slurm {_short(s['seen_at'])}: {s['state']}" + (f" ({s['reason']})" if s["reason"] else "")
                   + (f", booted {_short(s['boot_time'])}" if s["boot_time"] else ""))
    click.echo("\n== recurring faults")
    for r in h["recurring_faults"] or []:
        click.echo(f"  {r['kind']}{'' if r['code'] is None else ' ' + str(r['code'])} gpu {r['gpu'] or '-'}: "
                   f"{r['weeks']} weeks, {r['events']} events, {r['jobs_failed']} failed jobs, "
                   f"last {_short(r['last_seen'])}")
    if not h["recurring_faults"]:
        click.echo("  none")
    click.echo("\n== cause events by week")
    for r in h["faults_weekly"] or []:
        click.echo(f"  {r['week']}  {r['events']:>4}  {r['kind']}{'' if r['code'] is None else ' ' + str(r['code'])}")
    if not h["faults_weekly"]:
        click.echo("  none")
    click.echo("\n== failed jobs it ran")
    for r in h["failed_jobs"]:
        click.echo(f"  {r['job_id']:<12} {_short(r['job_time']):<20} {r['outcome'] or 'not attributed':<15} "
                   f"{'culprit' if r['culprit'] else ''}")
    if not h["failed_jobs"]:
        click.echo("  none")
    click.echo("\n== drains and resumes")
    for a in h["drain_actions"]:
        click.echo(f"  {_short(a['at'])}  {a['decision']:<10} {a['reason'] or ''} {a['detail'] or ''}".rstrip())
    if not h["drain_actions"]:
        click.echo("  none")
