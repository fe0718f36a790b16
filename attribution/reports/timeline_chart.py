"""The Vega-Lite chart of a job timeline (built with Altair): one row per node, time across.

Left, the evidence each node's sources gave (coverage); in the middle, the timed events: the root cause as a red
star with a dashed line down the chart and thin lines to where its consequences began on each node, the other
causes as triangles, symptoms as binned strips coloured by their most frequent kind, context events as grey
ticks, coverage gaps and culprit rows as tinted row bands; right, the events that carry no timestamp. Every mark
carries its source line for the tooltip and for the click panel of the page.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from attribution.reports.palette import CAUSE_COLOR, CONTEXT_COLOR, ROOT_COLOR, Palette
from attribution.reports.timeline_data import Mark, SymptomBin, Timeline

ROW_MIN, ROW_MAX, ROWS_HEIGHT = 18, 34, 600  # row height: taller when few rows, never under ROW_MIN
#: Width of all panels together (the page is 1280 px wide); the time panel gets what the others leave.
TOTAL_WIDTH, LABELS_WIDTH, SPACING = 1130, 110, 8
COVERAGE_COLUMN, UNTIMED_CAUSES_WIDTH, UNTIMED_SYMPTOMS_WIDTH = 22, 46, 150
STATUS_COLORS = {"ok": "#cfe8d5", "empty": "#e4e6ea", "missing": "#f6c86b", "error": "#e8776f"}
CULPRIT_BAND = "#fde2e0"
GAP_BAND = "#fff2d9"
ZEBRA_BAND = "#f5f6f8"
#: A star, as an SVG path in the unit square Vega uses for custom shapes.
STAR = ("M0,-1L0.235,-0.324L0.951,-0.309L0.38,0.124L0.588,0.809L0,0.4L-0.588,0.809L-0.38,0.124L-0.951,-0.309"
        "L-0.235,-0.324Z")
LINE_CHARS = 400


def _ms(t: datetime | None) -> int | None:
    return None if t is None else int(t.timestamp() * 1000)


def _hms(t: datetime | None) -> str:
    if t is None:
        return "no timestamp"
    return t.strftime("%H:%M:%S") + (f".{t.microsecond // 1000:03d}" if t.microsecond else "") + "Z"


def _span(a: datetime | None, b: datetime | None) -> str:
    if a is None:
        return "no timestamp"
    return _hms(a) if b is None or a == b else f"{_hms(a)} - {_hms(b)}"


def _short(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " ..."


def _what(m: Mark) -> str:
    code = f" (code {m.code})" if m.code is not None else ""
    gpu = f" gpu {m.gpu}" if m.gpu else ""
    rank = f" rank {m.rank}" if m.rank is not None else ""
    return f"{m.kind}{code}{gpu}{rank}"


def event_record(m: Mark) -> dict:
    label = {"root_cause": "ROOT CAUSE", "cause": "other cause (not explained)", "context": "context event",
             "symptom": "symptom"}.get(m.role, m.role)
    return {"r": m.row, "t": _ms(m.time), "role": label, "what": _what(m), "when": _hms(m.time),
            "ex": [[m.location, _short(m.line)]]}


def bin_record(b: SymptomBin) -> dict:
    explained = ("by the root cause" if b.of_root == b.count else
                 "not by the root cause" if b.of_root == 0 else f"{b.of_root} of {b.count} by the root cause")
    return {"r": b.row, "k": b.kind, "t0": _ms(b.start), "t1": _ms(b.end), "n": b.count,
            "what": ", ".join(f"{n} x {k}" for k, n in b.kinds), "when": _span(b.first, b.last), "why": explained,
            "ex": [[loc, _short(line)] for loc, line in b.examples]}


def _row_bands(tl: Timeline) -> list[dict]:
    culprits = {n for n, _ in tl.culprits}
    gaps: dict[str, list[str]] = {}
    for c in tl.gaps:
        if c.get("node"):
            gaps.setdefault(c["node"], []).append(f"{c['source']} {c['status']}" +
                                                  (f" ({c['reason']})" if c.get("reason") else ""))
    out = []
    for i, row in enumerate(tl.rows):
        kernel_gap = any(s.startswith("kernel ") for s in gaps.get(row, []))
        if row in culprits:
            fill, note = CULPRIT_BAND, "culprit node"
        elif kernel_gap:
            fill, note = GAP_BAND, "no kernel evidence"
        else:
            fill, note = (ZEBRA_BAND if i % 2 else "#ffffff"), ""
        out.append({"r": row, "fill": fill, "note": note, "gaps": "; ".join(gaps.get(row, [])) or "none"})
    return out


def _links(tl: Timeline) -> list[dict]:
    if tl.root is None or tl.root.time is None:
        return []
    out = []
    for i, (row, t) in enumerate(sorted(tl.first_consequence.items())):
        if row == tl.root.row and abs((t - tl.root.time).total_seconds()) < 1:
            continue
        out.append({"link": i, "r": tl.root.row, "t": _ms(tl.root.time), "o": 0})
        out.append({"link": i, "r": row, "t": _ms(t), "o": 1})
    return out


def _kind_colors(tl: Timeline, palette: Palette) -> tuple[list[str], list[str]]:
    """The symptom kinds of the chart, the most frequent first, each in its colour of the palette."""
    counts = Counter()
    for b in tl.bins:
        for k, n in b.kinds:
            counts[k] += n
    return palette.kinds(k for k, _ in counts.most_common())


def row_height(rows: int) -> int:
    return int(max(ROW_MIN, min(ROW_MAX, ROWS_HEIGHT / max(1, rows))))


def _culprit_test(tl: Timeline) -> str:
    names = sorted({n for n, _ in tl.culprits})
    return "indexof([" + ",".join("'" + n.replace("\\", "\\\\").replace("'", "\\'") + "'" for n in names) + \
        "], datum.value) >= 0"


def timeline_spec(tl: Timeline, palette: Palette) -> dict:
    """The Vega-Lite specification (a dict) of the timeline chart. Its time panel takes the width the other panels
    leave (usermeta.fit: the page's runtime fits the chart to its element; TOTAL_WIDTH without a script)."""
    import altair as alt

    rows = list(tl.rows)
    step = row_height(len(rows))
    height = max(len(rows), 3) * step
    y_scale = alt.Scale(domain=rows, paddingInner=0.0, paddingOuter=0.0)
    y_hidden = alt.Y("r:N", scale=y_scale, axis=None, title=None)
    culprit = _culprit_test(tl)
    y_labelled = alt.Y("r:N", scale=y_scale, title=None, axis=alt.Axis(
        labelColor={"condition": {"test": culprit, "value": ROOT_COLOR}, "value": "#222"},
        labelFontWeight={"condition": {"test": culprit, "value": "bold"}, "value": "normal"},
        labelFontSize=11, labelLimit=180, ticks=False, domain=False))
    lo, hi = tl.domain

    def x_of(field: str):
        return alt.X(f"{field}:T", title=None, scale=alt.Scale(type="utc", domain=[_ms(lo), _ms(hi)]),
                     axis=alt.Axis(format="%H:%M:%S", grid=True, gridColor="#e3e5e8", labelOverlap=True,
                                   orient="top"))

    x = x_of("t")
    tip_event = [alt.Tooltip("role:N", title="role"), alt.Tooltip("what:N", title="event"),
                 alt.Tooltip("r:N", title="node"), alt.Tooltip("when:N", title="time"),
                 alt.Tooltip("loc:N", title="source"), alt.Tooltip("line:N", title="line")]
    tip_bin = [alt.Tooltip("what:N", title="symptoms"), alt.Tooltip("r:N", title="node"),
               alt.Tooltip("when:N", title="time"), alt.Tooltip("why:N", title="explained"),
               alt.Tooltip("loc:N", title="first source"), alt.Tooltip("line:N", title="first line")]

    def with_line(chart):
        return chart.transform_calculate(loc="datum.ex[0][0]", line="datum.ex[0][1]")

    bands = alt.Chart(alt.Data(values=_row_bands(tl))).mark_rect(opacity=1).encode(
        y=y_hidden, x=alt.value(0), x2=alt.value("width"), color=alt.Color("fill:N", scale=None),
        tooltip=[alt.Tooltip("r:N", title="node"), alt.Tooltip("note:N", title="row"),
                 alt.Tooltip("gaps:N", title="coverage gaps")])
    layers = [bands]

    for t, label, align, dx in ((tl.job_start, "job start", "left", 3), (tl.job_end, "job end", "right", -3)):
        if t is not None and lo <= t <= hi:
            mark = [{"t": _ms(t), "label": label}]
            layers.append(alt.Chart(alt.Data(values=mark)).mark_rule(color="#555", strokeDash=[2, 3]).encode(x=x))
            layers.append(alt.Chart(alt.Data(values=mark)).mark_text(
                align=align, baseline="bottom", dx=dx, dy=-2, fontSize=10, color="#555").encode(
                x=x, y=alt.value(height), text="label:N"))

    kinds, colors = _kind_colors(tl, palette)
    timed_bins = [bin_record(b) for b in tl.bins if b.start is not None]
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    if timed_bins:
        layers.append(with_line(alt.Chart(alt.Data(values=timed_bins))).mark_rect(
            cornerRadius=1.5, stroke="#ffffff", strokeWidth=0.5, height={"band": 0.62}).encode(
            x=x_of("t0"), x2="t1:T", y=y_hidden,
            color=alt.Color("k:N", title="symptoms",
                            scale=alt.Scale(domain=kinds, range=colors),
                            legend=alt.Legend(orient="bottom", columns=4, symbolType="square")),
            opacity=alt.Opacity("n:Q", scale=alt.Scale(type="log", range=[0.55, 1.0]), legend=None),
            tooltip=tip_bin).add_params(zoom))
    else:
        layers[0] = layers[0].add_params(zoom)

    links = _links(tl)
    if links:
        layers.append(alt.Chart(alt.Data(values=links)).mark_line(
            color=ROOT_COLOR, strokeWidth=1, opacity=0.45 if len(links) <= 32 else 0.22, strokeDash=[4, 2]).encode(
            x=x, y=y_hidden, detail="link:N", order="o:Q"))
    context = [event_record(m) for m in tl.context if m.time is not None]
    if context:
        layers.append(with_line(alt.Chart(alt.Data(values=context))).mark_tick(
            color=CONTEXT_COLOR, thickness=1.5, size=step * 0.7).encode(x=x, y=y_hidden, tooltip=tip_event))
    causes = [event_record(m) for m in tl.causes if m.time is not None]
    if causes:
        layers.append(with_line(alt.Chart(alt.Data(values=causes))).mark_point(
            shape="triangle-up", filled=True, size=110, color=CAUSE_COLOR, stroke="#ffffff", strokeWidth=1,
            opacity=1).encode(x=x, y=y_hidden, tooltip=tip_event))
    root = tl.root
    if root is not None and root.time is not None:
        rec = [event_record(root)]
        layers.append(alt.Chart(alt.Data(values=rec)).mark_rule(
            color=ROOT_COLOR, strokeDash=[6, 3], strokeWidth=1.5).encode(x=x))
        layers.append(with_line(alt.Chart(alt.Data(values=rec))).mark_point(
            shape=STAR, filled=True, size=420, color=ROOT_COLOR, stroke="#000000", strokeWidth=0.8,
            opacity=1).encode(x=x, y=y_hidden, tooltip=tip_event))
    title = "time (UTC); scroll to zoom, drag to pan"
    if root is not None:
        title = f"root cause {_hms(root.time)}: {root.kind} on {root.row}   |   " + title
    coverage = _coverage_panel(tl, y_labelled, height)
    untimed = _untimed_panels(tl, y_hidden, height, kinds, colors, tip_event, tip_bin, with_line,
                              legend_shown=bool(timed_bins))
    others = LABELS_WIDTH + coverage.width + sum(p.width for p in untimed) + SPACING * (len(untimed) + 1)
    main = alt.layer(*layers).properties(width=max(400, TOTAL_WIDTH - others), height=height, title=alt.TitleParams(
        title, anchor="start", fontSize=11, fontWeight="normal", color=ROOT_COLOR if root else "#555"))
    panels = [coverage, main, *untimed]
    chart = alt.hconcat(*panels, spacing=SPACING).resolve_scale(y="shared", x="independent", color="independent",
                                                          opacity="independent", shape="independent",
                                                          size="independent")
    chart = chart.configure_view(stroke="#c9ccd1").configure_axis(labelFontSize=11).configure_legend(
        labelFontSize=11, titleFontSize=11, labelLimit=260)
    spec = chart.to_dict()
    spec["usermeta"] = {"fit": {"panel": 1, "others": others, "min": 400}}  # panels[1]: the time panel
    return spec


def _coverage_panel(tl: Timeline, y, height: int):
    import altair as alt

    cells = [{"r": c["node"], "src": c["source"], "status": c["status"],
              "detail": c.get("reason") or f"{c.get('lines', 0)} lines", "file": c.get("file") or "-"}
             for c in tl.coverage if c.get("node")]
    sources = sorted({c["src"] for c in cells}, key=lambda s: (s != "kernel", s))
    if not cells:
        cells = [{"r": r, "src": "logs", "status": "empty", "detail": "no coverage reported", "file": "-"}
                 for r in tl.rows]
        sources = ["logs"]
    statuses = list(STATUS_COLORS)
    return alt.Chart(alt.Data(values=cells)).mark_rect(stroke="#ffffff", strokeWidth=1).encode(
        x=alt.X("src:N", sort=sources, title=None,
                axis=alt.Axis(orient="top", labelAngle=-50, labelAlign="left", labelExpr="slice(datum.label, 0, 6)")),
        y=y, color=alt.Color("status:N", title="evidence", scale=alt.Scale(
            domain=statuses, range=[STATUS_COLORS[s] for s in statuses]),
            legend=alt.Legend(orient="bottom", direction="vertical")),
        tooltip=[alt.Tooltip("r:N", title="node"), alt.Tooltip("src:N", title="source"),
                 alt.Tooltip("status:N", title="status"), alt.Tooltip("detail:N", title="detail"),
                 alt.Tooltip("file:N", title="file")],
    ).properties(width=COVERAGE_COLUMN * len(sources), height=height)


def _untimed_panels(tl: Timeline, y, height: int, kinds, colors, tip_event, tip_bin, with_line,
                    legend_shown: bool) -> list:
    """The events that carry no timestamp: the causes among them as stars and triangles, the symptoms as one
    stacked bar per row (length: how many, colour: which kinds; with the legend when the time panel has none)."""
    import altair as alt

    panels = []
    title = {"anchor": "start", "fontSize": 11, "fontWeight": "normal", "color": "#555"}
    events = [event_record(m) for m in ((tl.root,) if tl.root else ()) + tl.causes if m.time is None]
    if events:
        roles = ["ROOT CAUSE", "other cause (not explained)"]
        panels.append(with_line(alt.Chart(alt.Data(values=events))).mark_point(filled=True, opacity=1).encode(
            y=y, shape=alt.Shape("role:N", scale=alt.Scale(domain=roles, range=[STAR, "triangle-up"]), legend=None),
            color=alt.Color("role:N", scale=alt.Scale(domain=roles, range=[ROOT_COLOR, CAUSE_COLOR]), legend=None),
            size=alt.Size("role:N", scale=alt.Scale(domain=roles, range=[380, 110]), legend=None),
            tooltip=tip_event).properties(width=UNTIMED_CAUSES_WIDTH, height=height,
                                          title=alt.TitleParams("untimed", **title)))
    bins = [bin_record(b) for b in tl.bins if b.start is None]
    if bins:
        panels.append(with_line(alt.Chart(alt.Data(values=bins))).mark_bar(height={"band": 0.62}).encode(
            y=y, x=alt.X("n:Q", stack="zero", title=None, axis=alt.Axis(orient="top", tickCount=3, grid=False,
                                                                        tickMinStep=1, format="~s")),
            color=alt.Color("k:N", title="symptoms", scale=alt.Scale(domain=kinds, range=colors),
                            legend=None if legend_shown else alt.Legend(orient="bottom", columns=1,
                                                                        symbolType="square")),
            order=alt.Order("k:N"), tooltip=tip_bin).properties(
            width=UNTIMED_SYMPTOMS_WIDTH, height=height, title=alt.TitleParams("symptoms, no timestamp", **title)))
    return panels
