"""The Vega-Lite charts of the fleet report (built with Altair), from store.reports.FleetData.

Failed jobs per week by outcome, fault events per week by kind, failed GPU-hours by cause, and one sparkline per
recurring node or GPU (its recurring faults' events per week). Every week of the report is on the axis, empty
ones included, so the trend reads true. Outcomes and kinds take their colours from reports.palette, the same in
every chart and page.
"""

from __future__ import annotations

import copy
import functools

from collections import defaultdict
from datetime import date

from attribution.reports.palette import Palette, outcome_scale
from attribution.store.reports import FleetData

WIDE, NARROW, HEIGHT = 1120, 540, 260
#: The name sparklines share their specification under (shell.chart_scripts' templates).
SPARKLINE = "sparkline"


def _week(d: date) -> str:
    return d.isoformat()


def _outcome_scale(present: set[str]):
    import altair as alt

    domain, colors = outcome_scale(present)
    return alt.Scale(domain=domain, range=colors)


def _kind_scale(palette: Palette, present: set[str]):
    import altair as alt

    domain, colors = palette.kinds(sorted(present))
    return alt.Scale(domain=domain, range=colors)


def failed_jobs_chart(data: FleetData) -> dict:
    import altair as alt

    rows = [{"week": _week(r["week"]), "outcome": r["outcome"], "jobs": int(r["jobs"])}
            for r in data.failed_jobs_weekly]
    weeks = [_week(w) for w in data.weeks]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("week:O", title="week (Monday, UTC)", scale=alt.Scale(domain=weeks), axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("sum(jobs):Q", title="failed jobs", axis=alt.Axis(tickMinStep=1, format="d")),
        color=alt.Color("outcome:N", title="outcome", scale=_outcome_scale({r["outcome"] for r in rows}),
                        legend=alt.Legend(orient="right")),
        order=alt.Order("outcome:N"),
        tooltip=[alt.Tooltip("week:O"), alt.Tooltip("outcome:N"), alt.Tooltip("sum(jobs):Q", title="jobs")],
    ).properties(width=NARROW - 150, height=HEIGHT, title="Failed jobs per week, by outcome").to_dict()


def fault_events_chart(data: FleetData, palette: Palette) -> dict:
    import altair as alt

    rows = [{"week": _week(r["week"]), "kind": r["kind"], "events": int(r["events"])}
            for r in data.fault_events_weekly]
    weeks = [_week(w) for w in data.weeks]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("week:O", title="week (Monday, UTC)", scale=alt.Scale(domain=weeks), axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("sum(events):Q", title="fault events on nodes", axis=alt.Axis(tickMinStep=1, format="d")),
        color=alt.Color("kind:N", title="kind", scale=_kind_scale(palette, {r["kind"] for r in rows}),
                        legend=alt.Legend(orient="right", labelLimit=200)),
        order=alt.Order("kind:N"),
        tooltip=[alt.Tooltip("week:O"), alt.Tooltip("kind:N"), alt.Tooltip("sum(events):Q", title="events")],
    ).properties(width=NARROW - 190, height=HEIGHT, title="Fault events per week, by kind").to_dict()


def gpu_hours_chart(data: FleetData, palette: Palette) -> dict:
    import altair as alt

    rows = [{"outcome": r["outcome"], "cause": r["cause"], "jobs": int(r["jobs"]),
             "gpu_hours": round(float(r["gpu_hours"]), 1)} for r in data.failed_gpu_hours]
    by_outcome: dict[str, float] = defaultdict(float)
    for r in rows:
        by_outcome[r["outcome"]] += r["gpu_hours"]
    order = sorted(by_outcome, key=lambda o: -by_outcome[o])
    base = alt.Chart(alt.Data(values=rows))
    bars = base.mark_bar().encode(
        y=alt.Y("outcome:N", sort=order, title=None),
        x=alt.X("sum(gpu_hours):Q", title="GPU-hours of failed jobs ((end - start) x nodes x GPUs per node)"),
        color=alt.Color("cause:N", title="root cause", scale=_kind_scale(palette, {r["cause"] for r in rows}),
                        legend=alt.Legend(orient="right", labelLimit=220)),
        order=alt.Order("sum(gpu_hours):Q", sort="descending"),
        tooltip=[alt.Tooltip("outcome:N"), alt.Tooltip("cause:N", title="root cause"),
                 alt.Tooltip("sum(jobs):Q", title="jobs"),
                 alt.Tooltip("sum(gpu_hours):Q", title="GPU-hours", format=",.1f")])
    totals = base.transform_aggregate(total="sum(gpu_hours)", groupby=["outcome"]).mark_text(
        align="left", dx=4, fontSize=11, color="#333").encode(
        y=alt.Y("outcome:N", sort=order), x=alt.X("total:Q"), text=alt.Text("total:Q", format=",.0f"))
    return alt.layer(bars, totals).properties(
        width=WIDE - 420, height=max(120, 30 * len(order)), title="Failed GPU-hours, by cause").to_dict()


def sparkline(weeks: tuple[date, ...], counts: dict[date, int]) -> dict:
    """Events per week as a tiny area chart, every week of the report present, empty ones as zero: its data and
    the name of the specification all sparklines share (sparkline_template)."""
    return {"template": SPARKLINE, "values": [{"week": _week(w), "events": int(counts.get(w, 0))} for w in weeks]}


def sparkline_template(weeks: tuple[date, ...]) -> dict:
    """The sparklines' specification without its data, in the page once (a page has dozens of sparklines)."""
    return copy.deepcopy(_sparkline_template(tuple(weeks)))


@functools.lru_cache(maxsize=4)
def _sparkline_template(weeks: tuple[date, ...]) -> dict:
    """Built and validated once per report (Altair's schema validation of each sparkline took 0.15 s)."""
    import altair as alt

    base = alt.Chart(alt.NamedData(name="events")).encode(
        x=alt.X("week:O", axis=None, scale=alt.Scale(domain=[_week(w) for w in weeks])),
        y=alt.Y("events:Q", axis=None, scale=alt.Scale(domainMin=0)),
        tooltip=[alt.Tooltip("week:O"), alt.Tooltip("events:Q")])
    return alt.layer(base.mark_area(color="#f4b6b0", line={"color": "#c62828", "strokeWidth": 1.2}),
                     base.mark_point(color="#c62828", filled=True, size=14)).properties(
        width=150, height=26).configure_view(stroke=None).to_dict()


def weekly_counts(data: FleetData, by_gpu: bool) -> dict[tuple, dict[date, int]]:
    """(cluster, node[, gpu]) -> week -> events of its recurring faults."""
    out: dict[tuple, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for r in data.recurring_weekly:
        key = (r["cluster"], r["node"], r["gpu"]) if by_gpu else (r["cluster"], r["node"])
        if by_gpu and r["gpu"] is None:
            continue
        out[key][r["week"]] += int(r["events"])
    return out
