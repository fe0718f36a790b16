"""The HTML around every page: head, inline CSS, the chart runtime, escaping.

A page is `document(title, body, specs, bundle, page_script)`: `specs` maps element ids to Vega-Lite
specifications; the runtime embeds each one with vega-embed (SVG, no action menu, so nothing can reach for the
network) and, when all are drawn, sets `data-ready="1"` on <body> (or `data-ready="error"` and a console error).
A page's own script may define `window.attributionPage.onChart(id, view)` to wire clicks.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Mapping

from attribution.reports.vega import json_for_script, script_tag

CSS = """
:root { --fg:#1d2127; --muted:#5f6670; --line:#d8dbe0; --bg:#ffffff; --panel:#f6f7f9; --red:#c62828;
        --amber:#9a6200; --green:#2e7d32; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
       font:14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "DejaVu Sans", sans-serif; }
main { max-width: 1280px; margin: 0 auto; padding: 18px 24px 40px; }
h1 { font-size: 20px; margin: 0 0 6px; font-weight: 600; }
h2 { font-size: 16px; margin: 28px 0 8px; font-weight: 600; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.muted { color: var(--muted); }
.facts { display:flex; flex-wrap:wrap; gap:4px 18px; color:var(--muted); font-size:13px; margin-bottom: 10px; }
.facts b { color: var(--fg); font-weight: 600; }
.verdict { border:1px solid var(--line); border-left: 6px solid var(--red); background: var(--panel);
           padding: 12px 16px; border-radius: 4px; }
.verdict.ok { border-left-color: var(--green); }
.verdict.soft { border-left-color: #8a8f98; }
.verdict .line1 { display:flex; flex-wrap:wrap; align-items:baseline; gap: 6px 18px; }
.badge { display:inline-block; padding: 2px 10px; border-radius: 12px; background: var(--red); color:#fff;
         font-weight:600; font-size: 15px; letter-spacing: .02em; }
.verdict.ok .badge { background: var(--green); }
.verdict.soft .badge { background: #5f6670; }
.kv { display:grid; grid-template-columns: 110px 1fr; gap: 4px 12px; margin-top: 10px; }
.kv > dt { color: var(--muted); }
.kv > dd { margin: 0; min-width: 0; }
code, pre, .mono { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
pre.src { margin: 4px 0 0; padding: 6px 8px; background: #fff; border: 1px solid var(--line); border-radius: 3px;
          white-space: pre-wrap; word-break: break-all; max-height: 16em; overflow: auto; }
.culprit { color: var(--red); font-weight: 600; }
.node { font-weight: 600; }
.gap { color: var(--amber); }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; background: var(--panel); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.chart { overflow-x: auto; padding: 4px 0; }
.panel { border:1px solid var(--line); border-radius: 4px; padding: 8px 12px; background: var(--panel);
         margin-top: 8px; }
ol.sequence { padding-left: 0; list-style: none; margin: 0; }
ol.sequence > li { border:1px solid var(--line); border-radius: 4px; padding: 6px 10px; margin: 6px 0; }
ol.sequence > li.root { border-left: 6px solid var(--red); background: #fff6f5; }
ol.sequence > li.consequence { border-left: 6px solid #f28e2b; margin-left: 28px; }
ol.sequence > li.cause { border-left: 6px solid #6a1b9a; }
ol.sequence > li.symptom { border-left: 6px solid #b0b4ba; margin-left: 28px; }
ol.sequence > li.context, ol.sequence > li.outside { border-left: 6px solid #d8dbe0; }
ol.sequence > li.verdict { border-left: 6px solid #5f6670; background: var(--panel); }
.step { display:inline-block; min-width: 6.5em; margin-right: 8px; color: var(--muted); font-size: 12px; }
details > summary { cursor: pointer; }
.grid2 { display:grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 8px 28px; }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
#vg-tooltip-element.vg-tooltip { max-width: 720px; font-size: 12px; }
#vg-tooltip-element.vg-tooltip td.value { white-space: pre-wrap; word-break: break-all; min-width: 300px;
  max-width: 560px; max-height: none; overflow: visible; }
"""

RUNTIME = """
(function () {
  var specs = JSON.parse(document.getElementById('chart-specs').textContent);
  var page = window.attributionPage || {};
  var opts = {actions: false, renderer: 'svg', tooltip: {theme: 'light'}};
  var jobs = Object.keys(specs).map(function (id) {
    return vegaEmbed('#' + id, specs[id], opts).then(function (res) {
      if (page.onChart) { page.onChart(id, res.view); }
      return res;
    });
  });
  Promise.all(jobs).then(function () {
    document.body.setAttribute('data-ready', '1');
  }).catch(function (err) {
    document.body.setAttribute('data-ready', 'error');
    console.error('chart failed: ' + (err && err.message ? err.message : err));
  });
})();
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(t: datetime | None, with_date: bool = False) -> str:
    if t is None:
        return "no timestamp"
    return t.strftime("%Y-%m-%d %H:%M:%SZ" if with_date else "%H:%M:%SZ")


def document(title: str, body: str, specs: Mapping[str, dict], bundle: str, page_script: str = "") -> str:
    """One self-contained HTML document."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        "</head><body>",
        body,
        f'<script type="application/json" id="chart-specs">{json_for_script(dict(specs))}</script>',
        script_tag(bundle),
        f"<script>{page_script}</script>" if page_script else "",
        f"<script>{RUNTIME}</script>",
        "</body></html>",
    ])
