"""The fleet report page: totals, the weekly charts, the recurring nodes and GPUs with sparklines, the drain
candidates and the GPU-hours lost by cause, over store.reports.FleetData.

`fleet_parts` gives the page's body and charts; `fleet_html` makes them one self-contained file (`attribution
report fleet`), the dashboard puts them in its own frame. With `links` (the dashboard's), node names and job ids
lead to their pages; a static report names them only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from attribution.store.reports import FleetData
from attribution.reports.fleet_charts import (SPARKLINE, failed_jobs_chart, fault_events_chart, gpu_hours_chart,
                                              sparkline, sparkline_template, weekly_counts)
from attribution.reports.palette import Palette
from attribution.reports.shell import document, esc


class Links(Protocol):
    """Where a node's and a job's pages are (attribution.web.urls)."""

    def node(self, cluster: str, node: str) -> str: ...

    def job(self, cluster: str, job_id: str, start: str | None = None) -> str: ...


@dataclass(frozen=True)
class FleetParts:
    title: str
    body: str
    specs: dict
    templates: dict


def _node(links: Links | None, cluster, node) -> str:
    name = f"<b>{esc(node)}</b>"
    if links is None or not cluster or not node:
        return name
    return f'<a class="node" href="{esc(links.node(str(cluster), str(node)))}">{esc(node)}</a>'


def _job(links: Links | None, cluster, job_id) -> str:
    if links is None or not cluster or not job_id:
        return esc(job_id)
    return f'<a href="{esc(links.job(str(cluster), str(job_id)))}">{esc(job_id)}</a>'


def _stat(label: str, value: str, element_id: str) -> str:
    return (f'<div class="stat" id="{element_id}"><div class="value">{esc(value)}</div>'
            f'<div class="muted">{esc(label)}</div></div>')


def _day(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d") if t else "-"


def _recurring_table(rows: list[dict], counts: dict, by_gpu: bool, weeks, prefix: str,
                     links: Links | None) -> tuple[str, dict]:
    """The table and its sparklines' specifications (by element id)."""
    specs: dict = {}
    if not rows:
        return '<p class="muted">No fault recurred on a node in two or more weeks.</p>', specs
    head = ("<tr><th>node</th>" + ("<th>gpu</th>" if by_gpu else "") +
            "<th>recurring faults</th><th class=\"num\">weeks</th><th class=\"num\">events</th>"
            "<th class=\"num\">failed jobs</th><th>first seen</th><th>last seen</th><th>events per week</th></tr>")
    body = []
    for i, r in enumerate(rows):
        key = (r["cluster"], r["node"], r["gpu"]) if by_gpu else (r["cluster"], r["node"])
        chart_id = f"{prefix}-{i}"
        specs[chart_id] = sparkline(weeks, counts.get(key, {}))
        body.append(
            f'<tr data-node="{esc(r["node"])}"><td>{_node(links, r["cluster"], r["node"])} <span class="muted">'
            f'{esc(r["cluster"])}</span></td>' + (f'<td class="mono">{esc(r["gpu"])}</td>' if by_gpu else "") +
            f'<td>{esc(r["faults"])}</td><td class="num">{r["weeks"]}</td><td class="num">{r["events"]}</td>'
            f'<td class="num">{r["jobs_failed"]}</td><td>{esc(_day(r.get("first_seen")))}</td>'
            f'<td>{esc(_day(r["last_seen"]))}</td>'
            f'<td><div class="spark" id="{chart_id}"></div></td></tr>')
    return f'<table id="{prefix}">{head}{"".join(body)}</table>', specs


def _evidence(evidence, cluster, links: Links | None) -> str:
    """The drain policy's evidence as short lines: the condition, what happened, where, how often, when."""
    if not evidence:
        return ""
    items = evidence if isinstance(evidence, list) else [evidence]
    lines = []
    for e in items:
        if not isinstance(e, dict):
            lines.append(esc(json.dumps(e, default=str)[:200]))
            continue
        what = " ".join(str(e[k]) for k in ("kind", "code") if e.get(k) is not None)
        gpu = f" gpu {e['gpu']}" if e.get("gpu") else ""
        events = e.get("events")
        jobs = ", ".join(esc(j.get("cluster")) + "/" + _job(links, j.get("cluster"), j.get("job_id"))
                         if isinstance(j, dict) else _job(links, cluster, j) for j in (e.get("jobs") or [])[:5])
        count = f", {len(events)} event(s)" if isinstance(events, list) else ""
        last = f", last {str(e['last_seen'])[:16].replace('T', ' ')}" if e.get("last_seen") else ""
        lines.append(f"<b>{esc(e.get('condition', ''))}</b> {esc(what)}{esc(gpu)}{esc(count)}"
                     f"{' in ' + jobs if jobs else ''}{esc(last)}")
    return "<br>".join(lines)


def _drain_table(rows: list[dict], links: Links | None) -> str:
    if not rows:
        return ('<p class="muted" id="drain-candidates">No node to drain now: the drain policy '
                '(attribution.drain_candidates) names none.</p>')
    body = []
    for r in rows:
        score = "" if r["score"] is None else f"{float(r['score']):.2f}"
        body.append(f'<tr data-node="{esc(r["node"])}"><td>{_node(links, r["cluster"], r["node"])} '
                    f'<span class="muted">{esc(r["cluster"])}</span></td><td>{esc(r["reason"])}</td>'
                    f'<td class="num">{score}</td><td>{_evidence(r["evidence"], r["cluster"], links)}</td></tr>')
    return ('<table id="drain-candidates"><tr><th>node</th><th>reason</th><th class="num">score</th>'
            f"<th>evidence</th></tr>{''.join(body)}</table>")


def _gpu_hours_table(data: FleetData) -> str:
    rows = "".join(
        f'<tr><td>{esc(r["outcome"])}</td><td>{esc(r["cause"])}</td><td class="num">{r["jobs"]}</td>'
        f'<td class="num">{float(r["gpu_hours"]):,.1f}</td>'
        f'<td class="num">{float(r.get("lost_gpu_hours") or 0):,.1f}</td>'
        f'<td class="num">{r["jobs_without_size"] or ""}</td></tr>'
        for r in data.failed_gpu_hours)
    return ("<details><summary>as a table</summary><table id=\"gpu-hours-table\"><tr><th>outcome</th>"
            "<th>root cause</th><th class=\"num\">failed jobs</th><th class=\"num\">GPU-hours</th>"
            "<th class=\"num\">lost GPU-hours (since the last checkpoint)</th>"
            "<th class=\"num\">jobs without GPU count or end</th></tr>" + rows + "</table></details>")


def _recurrence_table(rows: list[dict], links: Links | None) -> str:
    if not rows:
        return ('<p class="muted" id="recurring-failures">No workload failed again on the same cause in this '
                'period.</p>')
    body = "".join(
        f'<tr><td><b>{esc(r["workload"])}</b> <span class="muted">'
        f'{"job name" if r.get("workload_by") == "job_name" else "job id"} · {esc(r["cluster"])}</span></td>'
        f'<td>{esc(r["user_name"] or "")}</td><td>{esc(r["outcome"])}</td><td>{esc(r["root_kind"])}</td>'
        f'<td class="num">{r["failures"]}</td><td>{_job(links, r["cluster"], r["first_job_id"])}</td>'
        f'<td>{_job(links, r["cluster"], r["last_job_id"])}</td>'
        f'<td class="num">{float(r["repeats_lost_gpu_hours"]):,.1f}</td></tr>' for r in rows)
    return ('<table id="recurring-failures"><tr><th>workload</th><th>user</th><th>outcome</th><th>root cause</th>'
            '<th class="num">failures on this cause</th><th>first job</th><th>latest job</th>'
            '<th class="num">lost GPU-hours of the repeats in this period</th></tr>' + body + "</table>")


EXTRA_CSS = """
<style>
.stats { display:flex; flex-wrap:wrap; gap: 12px; margin: 12px 0 4px; }
.stat { border:1px solid var(--line); border-radius: 4px; padding: 8px 16px; min-width: 150px;
        background: var(--panel); }
.stat .value { font-size: 22px; font-weight: 600; }
.spark { width: 160px; height: 30px; }
table td { vertical-align: middle; }
</style>"""


def fleet_parts(data: FleetData, palette: Palette, links: Links | None = None,
                generated_at: datetime | None = None) -> FleetParts:
    """The page's title, its body (what goes inside <main>) and its charts."""
    last_day = data.until - timedelta(days=1)  # the Sunday that ends the last week
    nodes, node_sparks = _recurring_table(data.recurring_nodes, weekly_counts(data, False), False, data.weeks,
                                          "recurring-nodes", links)
    gpus, gpu_sparks = _recurring_table(data.recurring_gpus, weekly_counts(data, True), True, data.weeks,
                                        "recurring-gpus", links)
    specs = {"chart-failed-jobs": failed_jobs_chart(data), "chart-fault-events": fault_events_chart(data, palette),
             "chart-gpu-hours": gpu_hours_chart(data, palette), **node_sparks, **gpu_sparks}
    templates = {SPARKLINE: sparkline_template(data.weeks)} if node_sparks or gpu_sparks else {}
    t = data.totals
    stamp = (generated_at or datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z")
    body = f"""{EXTRA_CSS}
<h1>Fleet report: {len(data.weeks)} week(s), from the week of {esc(_day(data.since))} to the week of
{esc(_day(data.weeks[-1]))}</h1>
<div class="facts"><span>weeks are ISO weeks (Monday 00:00 UTC), the current one so far; a job counts in the week
it ended</span></div>
<div class="stats">
  {_stat("jobs", f"{t['jobs']:,}", "stat-jobs")}
  {_stat("failed jobs", f"{t['failed']:,}", "stat-failed")}
  {_stat("GPU-hours of failed jobs", f"{float(t['failed_gpu_hours']):,.0f}", "stat-gpu-hours")}
  {_stat("recurring nodes", f"{len(data.recurring_nodes):,}", "stat-recurring")}
  {_stat("drain candidates", f"{len(data.drain_candidates):,}", "stat-drain")}
</div>
<div class="grid2">
  <div class="chart" id="chart-failed-jobs"></div>
  <div class="chart" id="chart-fault-events"></div>
</div>
<h2>Top recurring nodes</h2>
<p class="muted">Nodes with a fault (same kind and code) in two or more ISO weeks of their history, seen in this
period. Weeks, events and failed jobs count this period only (the weeks the sparkline draws); failed jobs are those
whose root cause was that fault on that node; first seen is the fault's first event ever.</p>
{nodes}
<h2>Top recurring GPUs</h2>
{gpus}
<h2>Drain candidates</h2>
{_drain_table(data.drain_candidates, links)}
<h2>Failed GPU-hours by cause</h2>
<div class="chart" id="chart-gpu-hours"></div>
{_gpu_hours_table(data)}
<h2>Workloads failing again on the same cause</h2>
<p class="muted">A workload is a user's job id on a cluster with its requeues, or one job array; the cause is the
root cause's outcome, kind and code.</p>
{_recurrence_table(data.recurring_failures, links)}
<footer>attribution fleet report · generated {esc(stamp)} · from the views job_verdicts, node_faults_weekly,
recurring_faults, fault_events, drain_candidates, lost_gpu_hours, failure_recurrence</footer>"""
    return FleetParts(f"Fleet report {_day(data.since)} to {_day(last_day)}", body, specs, templates)


def fleet_html(data: FleetData, bundle: str, generated_at: datetime | None = None,
               palette: Palette | None = None) -> str:
    """The fleet report as one self-contained page, with the chart library's JavaScript `bundle` inlined."""
    parts = fleet_parts(data, palette or Palette.shipped(), None, generated_at)
    return document(parts.title, f"<main>{parts.body}</main>", parts.specs, bundle, templates=parts.templates)
