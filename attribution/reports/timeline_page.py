"""The job timeline page: the verdict on top, the chart, then what happened in order of cause, then the evidence.

The list under the chart starts with the root cause, followed by its consequences grouped by kind (in the order
they began, one line per node inside), then the causes left unexplained, the symptoms the root cause does not
explain, the context events and the events seen outside the job window.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from attribution.reports.palette import Palette, outcome_class
from attribution.reports.render import followed_text
from attribution.reports.shell import chart_scripts, document, esc, when
from attribution.reports.timeline_chart import timeline_spec
from attribution.reports.timeline_data import Mark, SymptomGroup, Timeline

LIST_LIMIT = 200  # context and outside-window events listed at most
LINE_LIMIT = 1000

CLICK_SCRIPT = """
window.attributionPage = {onChart: function (id, view) {
  view.addEventListener('click', function (ev, item) {
    var d = item && item.datum;
    if (!d || !d.ex) { return; }
    var panel = document.getElementById('detail');
    panel.textContent = '';
    var head = document.createElement('div');
    head.innerHTML = '<b></b> <span class="muted"></span>';
    head.firstChild.textContent = (d.role ? d.role + ': ' : '') + d.what + ' on ' + d.r;
    head.lastChild.textContent = d.when + (d.why ? ' (explained ' + d.why + ')' : '');
    panel.appendChild(head);
    d.ex.forEach(function (e) {
      var pre = document.createElement('pre');
      pre.className = 'src';
      pre.textContent = e[0] + '\\n' + e[1];
      panel.appendChild(pre);
    });
    if (d.n && d.n > d.ex.length) {
      var more = document.createElement('div');
      more.className = 'muted';
      more.textContent = (d.n - d.ex.length) + ' more line(s) of this kind in this time slice (first and last shown)';
      panel.appendChild(more);
    }
  });
}};
"""


def _line(text: str) -> str:
    return esc(text if len(text) <= LINE_LIMIT else text[:LINE_LIMIT] + " ...")


def _duration(a: datetime | None, b: datetime | None) -> str:
    if a is None or b is None:
        return ""
    s = int((b - a).total_seconds())
    h, m = divmod(s // 60, 60)
    return f" ({h} h {m:02d} min)" if h else f" ({m} min {s % 60:02d} s)"


def culprits_of(tl: Timeline) -> frozenset[str]:
    return frozenset(n for n, _ in tl.culprits)


def _event_title(m: Mark, culprits: frozenset[str] = frozenset()) -> str:
    code = f" (code {m.code})" if m.code is not None else ""
    gpu = f" gpu <span class=\"mono\">{esc(m.gpu)}</span>" if m.gpu else ""
    rank = f" rank {m.rank}" if m.rank is not None else ""
    node = "culprit" if m.row in culprits else "node"
    return (f"<b>{esc(m.kind)}</b>{code} on <span class=\"{node}\">{esc(m.row)}</span>{gpu}{rank} at "
            f"<b>{esc(when(m.time))}</b>")


def _src(m: Mark) -> str:
    return f'<pre class="src">{esc(m.location)}\n{_line(m.line)}</pre>'


def _header(tl: Timeline) -> str:
    job = tl.job
    nodes = job.get("nodes") or []
    facts = [f"state <b>{esc(job.get('state'))}</b>", f"exit <b>{esc(job.get('exit_code') or '-')}</b>",
             f"<b>{len(nodes)}</b> node(s)"]
    if job.get("user"):
        facts.append(f"user <b>{esc(job['user'])}</b>")
    if job.get("partition"):
        facts.append(f"partition <b>{esc(job['partition'])}</b>")
    facts.append(f"ran <b>{esc(when(tl.job_start, True))}</b> to <b>{esc(when(tl.job_end, True))}</b>"
                 f"{_duration(tl.job_start, tl.job_end)}")
    if tl.root is not None:
        r = tl.root
        root = (f'<dd id="root-cause" data-kind="{esc(r.kind)}" data-node="{esc(r.row)}" '
                f'data-time="{esc(r.time.isoformat() if r.time else "")}">'
                f"{_event_title(r, culprits_of(tl))}{_src(r)}</dd>")
    else:
        root = '<dd id="root-cause" data-kind="" data-node="">none found</dd>'
    culprits = ", ".join(
        f'<span class="culprit" data-node="{esc(n)}">{esc(n)}</span>' +
        (f' (gpu <span class="mono">{esc(g)}</span>)' if g else "")
        for n, g in tl.culprits) or '<span class="muted">none</span>'
    counts = Counter(c.get("status") for c in tl.coverage)
    gaps: dict[tuple, list[str]] = {}
    for c in tl.gaps:
        gaps.setdefault((c.get("source"), c.get("status")), []).append(c.get("node") or "job")
    gap_text = "; ".join(f"{src} {status} on {len(names)} node(s): " + ", ".join(names[:4]) +
                         (" ..." if len(names) > 4 else "") for (src, status), names in sorted(gaps.items()))
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    coverage = (f"{esc(summary)}" + (f' <span class="gap">(gaps: {esc(gap_text)})</span>' if gaps else "")
                if tl.coverage else '<span class="gap">no coverage reported</span>')
    return f"""
<h1>Job <span id="job-id">{esc(job.get('cluster'))}/{esc(job.get('job_id'))}</span></h1>
<div class="facts">{''.join(f'<span>{f}</span>' for f in facts)}</div>
<section class="verdict {outcome_class(tl.outcome, "v")}" id="verdict">
  <div class="line1"><span class="badge {outcome_class(tl.outcome)}" id="outcome">{esc(tl.outcome)}</span>
    <span>confidence <b id="confidence">{esc(tl.confidence)}</b></span>
    <span>action <b id="action">{esc(tl.action)}</b></span>
    <span class="muted" id="followed">{esc(followed_text(tl.symptoms_total, len(tl.causes), tl.root is not None))}</span></div>
  <dl class="kv">
    <dt>root cause</dt>{root}
    <dt>culprits</dt><dd id="culprits">{culprits}</dd>
    <dt>why</dt><dd id="explanation">{esc(tl.explanation)}</dd>
    <dt>evidence</dt><dd id="coverage-summary">{coverage}</dd>
  </dl>
</section>"""


def _group_item(g: SymptomGroup, css: str, role: str) -> str:
    rows = "".join(
        f"<tr><td>{esc(row)}</td><td class=\"num\">{n}</td><td>{esc(when(a))}</td><td>{esc(when(b))}</td>"
        f"<td><span class=\"mono muted\">{esc(loc)}</span><pre class=\"src\">{_line(line)}</pre></td></tr>"
        for row, n, a, b, loc, line in g.by_row)
    span = when(g.first) if g.first == g.last else f"{when(g.first)} to {when(g.last)}"
    if g.of_root:
        why = "explained by the root cause"
    elif g.explained_by:
        why = "explained by " + ", ".join(esc(r) for r in g.explained_by[:3])
    else:
        why = "explained by no cause found"
    first = g.first.isoformat() if g.first else ""
    return (f'<li class="{css}" data-role="{role}" data-kind="{esc(g.kind)}" data-count="{g.count}" '
            f'data-first="{esc(first)}"><span class="step">{"consequence" if g.of_root else "symptom"}</span>'
            f'<details><summary><b>{g.count}</b> x <b>{esc(g.kind)}</b> on {len(g.by_row)} node(s), '
            f'{esc(span)} <span class="muted">({why})</span></summary>'
            f"<table><tr><th>node</th><th class=\"num\">lines</th><th>first</th><th>last</th>"
            f"<th>first line</th></tr>{rows}</table></details></li>")


def _event_list(marks: tuple[Mark, ...], css: str, role: str, title: str, culprits: frozenset[str]) -> str:
    if not marks:
        return ""
    items = "".join(f"<li>{_event_title(m, culprits)}{_src(m)}</li>" for m in marks[:LIST_LIMIT])
    more = f"<p class=\"muted\">and {len(marks) - LIST_LIMIT} more</p>" if len(marks) > LIST_LIMIT else ""
    return (f'<li class="{css}" data-role="{role}" data-count="{len(marks)}"><span class="step">{css}</span>'
            f"<details><summary>{esc(title)} ({len(marks)})</summary><ul>{items}</ul>{more}</details></li>")


def _by_kind_and_row(marks: tuple[Mark, ...]) -> list[list[Mark]]:
    groups: dict[tuple[str, str], list[Mark]] = {}
    for m in marks:
        groups.setdefault((m.kind, m.row), []).append(m)
    return list(groups.values())


def _cause_item(ms: list[Mark], culprits: frozenset[str]) -> str:
    m = ms[0]
    head = (f'<li class="cause" data-role="cause" data-kind="{esc(m.kind)}" data-node="{esc(m.row)}" '
            f'data-first="{esc(m.time.isoformat() if m.time else "")}" data-count="{len(ms)}">'
            f'<span class="step">other cause</span>')
    note = '<span class="muted">(not explained by an earlier cause)</span>'
    if len(ms) == 1:
        return f"{head}{_event_title(m, culprits)} {note}{_src(m)}</li>"
    timed = [x.time for x in ms if x.time is not None]
    span = f"{when(min(timed))} to {when(max(timed))}" if timed else "no timestamp"
    lines = "".join(f"<li>{esc(when(x.time))}{_src(x)}</li>" for x in ms[:LIST_LIMIT])
    return (f"{head}<details><summary><b>{len(ms)}</b> x <b>{esc(m.kind)}</b> on "
            f'<span class="{"culprit" if m.row in culprits else "node"}">{esc(m.row)}</span>, {esc(span)} {note}'
            f"</summary><ul>{lines}</ul></details></li>")


def _sequence(tl: Timeline) -> str:
    culprits = culprits_of(tl)
    items = []
    if tl.root is not None:
        r = tl.root
        items.append(f'<li class="root" data-role="root_cause" data-kind="{esc(r.kind)}" data-node="{esc(r.row)}" '
                     f'data-first="{esc(r.time.isoformat() if r.time else "")}"><span class="step">root cause</span>'
                     f"{_event_title(r, culprits)}{_src(r)}</li>")
    else:
        items.append(f'<li class="verdict" data-role="no_root_cause"><span class="step">verdict</span>'
                     f"No cause event was found. {esc(tl.explanation)}</li>")
    items += [_group_item(g, "consequence", "consequence") for g in tl.groups if g.of_root]
    items += [_cause_item(ms, culprits) for ms in _by_kind_and_row(tl.causes)]
    items += [_group_item(g, "symptom", "symptom") for g in tl.groups if not g.of_root]
    items.append(_event_list(tl.context, "context", "context", "context events (recorded, not used in the verdict)",
                             culprits))
    items.append(_event_list(tl.outside, "outside", "outside_window",
                             "seen outside the job window (not part of this job's verdict)", culprits))
    return '<ol class="sequence" id="sequence">' + "".join(items) + "</ol>"


def _coverage_table(tl: Timeline) -> str:
    """Gaps first, grouped by what is missing and why (64 nodes without a Fabric Manager log are one line); every
    report in a table below, folded."""
    if not tl.coverage:
        return '<p class="gap">No coverage was reported for this job.</p>'
    gaps: dict[tuple, list[str]] = {}
    for c in tl.gaps:
        gaps.setdefault((c.get("source"), c.get("status"), c.get("reason") or ""), []).append(c.get("node") or "job")
    gap_rows = "".join(
        f'<tr class="gap"><td>{esc(src)}</td><td>{esc(status)}</td><td>{esc(reason)}</td>'
        f'<td class="num">{len(nodes)}</td><td>{esc(", ".join(nodes[:12]) + (" ..." if len(nodes) > 12 else ""))}'
        f"</td></tr>" for (src, status, reason), nodes in sorted(gaps.items()))
    gap_table = ("<table id=\"coverage-gaps\"><tr><th>source</th><th>status</th><th>reason</th>"
                 "<th class=\"num\">nodes</th><th>which</th></tr>" + gap_rows + "</table>") if gaps else \
        '<p>Every source was read (no gaps).</p>'
    rows = []
    for c in sorted(tl.coverage, key=lambda c: (c.get("status") == "ok", c.get("node") or "", c.get("source"))):
        css = "" if c.get("status") == "ok" else ' class="gap"'
        notes = "; ".join(c.get("notes") or [])
        rows.append(f"<tr{css}><td>{esc(c.get('node') or 'job')}</td><td>{esc(c.get('source'))}</td>"
                    f"<td>{esc(c.get('status'))}</td><td class=\"num\">{esc(c.get('lines', 0))}</td>"
                    f"<td class=\"mono\">{esc(c.get('file') or '')}</td>"
                    f"<td>{esc(c.get('reason') or '')}{esc('; ' + notes if notes else '')}</td></tr>")
    return (gap_table + f"<details><summary>every source ({len(rows)})</summary>"
            "<table id=\"coverage\"><tr><th>node</th><th>source</th><th>status</th><th class=\"num\">lines</th>"
            "<th>file</th><th>reason</th></tr>" + "".join(rows) + "</table></details>")


def chart_section(tl: Timeline) -> str:
    """The chart with its key and the panel its clicks fill (the job page of the dashboard shows it too)."""
    span = f"{when(tl.domain[0])} to {when(tl.domain[1])}"
    return f"""<p class="muted">One row per node; the chart opens on {esc(span)} (symptoms binned every {tl.bin_seconds} s;
red star: root cause; dashed red lines: where its consequences began on each node; purple triangles: other causes;
grey ticks: context events; tinted rows: culprits (red) and nodes without kernel evidence (amber)).</p>
<noscript><p class="muted">The chart needs JavaScript; the lists on this page say the same in words.</p></noscript>
<div class="chart" id="timeline"></div>
<div class="panel" id="detail"><span class="muted">Click a mark to see its source lines here; hover for a
summary.</span></div>"""


def chart_specs(tl: Timeline, palette: Palette) -> dict[str, dict]:
    return {"timeline": timeline_spec(tl, palette)}


def chart_page_scripts(tl: Timeline, palette: Palette, bundle: str | None = None,
                       script_src: str | None = None) -> str:
    """The scripts chart_section needs: the specification, the chart library, the click panel's script."""
    return chart_scripts(chart_specs(tl, palette), bundle, CLICK_SCRIPT, script_src=script_src)


def timeline_body(tl: Timeline) -> str:
    """What goes inside <main>: the verdict, the chart, what happened in order of cause, the evidence."""
    return f"""{_header(tl)}
<h2>Timeline</h2>
{chart_section(tl)}
<h2>What happened, in order of cause</h2>
{_sequence(tl)}
<h2>Evidence collected</h2>
{_coverage_table(tl)}
<footer>attribution job timeline · rules {esc(tl.rules_version[:12] or '-')} · times in UTC</footer>"""


def timeline_title(tl: Timeline) -> str:
    return f"{tl.job.get('cluster')}/{tl.job.get('job_id')}: {tl.outcome}"


def timeline_html(tl: Timeline, bundle: str, palette: Palette | None = None) -> str:
    """The whole page for one job, with the chart library's JavaScript `bundle` inlined."""
    return document(timeline_title(tl), f"<main>\n{timeline_body(tl)}\n</main>",
                    chart_specs(tl, palette or Palette.shipped()), bundle, CLICK_SCRIPT)
