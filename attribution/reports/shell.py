"""The HTML around every page: head, inline CSS, the chart runtime, escaping.

A page is `document(title, body, specs, bundle, page_script)`: `specs` maps element ids to Vega-Lite
specifications (or to `{"template": name, "values": [...]}`, a shared specification of `templates` with its own
data: the fleet report's dozens of sparklines carry their specification once). The runtime embeds each one with
vega-embed (SVG, no action menu, so nothing can reach for the network, every text in the page's one font) and,
when all are drawn, sets `data-ready="1"` on <body> (or `data-ready="error"` and a console error). A
specification whose `usermeta.fit` names one of its side-by-side panels is fitted to its element's width: that
panel gets what the others leave (and again when the window is resized). A page's own script may define
`window.attributionPage.onChart(id, view)` to wire clicks.

A static page inlines the chart library (`bundle`); the dashboard's pages load it from one cached URL instead
(`script_src`).
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Mapping

from attribution.reports.palette import outcome_css
from attribution.reports.vega import json_for_script, script_tag

#: The one font family of the pages and their charts; source lines and identifiers are set in MONO.
FONT = '-apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "DejaVu Sans", sans-serif'
MONO = '"DejaVu Sans Mono", Menlo, Consolas, monospace'

_CSS = """
:root { --fg:#1d2127; --muted:#5f6670; --line:#d8dbe0; --bg:#ffffff; --panel:#f6f7f9; --red:#c62828;
        --amber:#9a6200; --green:#2e7d32; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
       font:14px/1.45 %FONT%; }
button, input, select, textarea { font: inherit; }
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
.verdict .line1 { display:flex; flex-wrap:wrap; align-items:baseline; gap: 6px 18px; }
.badge { display:inline-block; padding: 2px 10px; border-radius: 12px; background: #5f6670; color:#fff;
         font-weight:600; font-size: 15px; letter-spacing: .02em; }
.kv { display:grid; grid-template-columns: 110px 1fr; gap: 4px 12px; margin-top: 10px; }
.kv > dt { color: var(--muted); }
.kv > dd { margin: 0; min-width: 0; }
code, pre, .mono { font-family: %MONO%; font-size: 12px; }
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
.chart.vega-embed { display: block; }  /* vega-embed makes it inline-block: its width would be the chart's */
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
#vg-tooltip-element.vg-tooltip { max-width: 720px; font-size: 12px; font-family: %FONT%; }
#vg-tooltip-element.vg-tooltip td.value { white-space: pre-wrap; word-break: break-all; min-width: 300px;
  max-width: 560px; max-height: none; overflow: visible; }
"""

#: The CSS of every page: the font stacks and each outcome's badge colour (palette.py) filled in.
CSS = _CSS.replace("%FONT%", FONT).replace("%MONO%", MONO) + outcome_css() + "\n"

RUNTIME = """
(function () {
  var data = JSON.parse(document.getElementById('chart-specs').textContent);
  var page = window.attributionPage || {};
  var opts = {actions: false, renderer: 'svg', tooltip: {theme: 'light'}, config: {font: FONT}};
  var views = {};
  function spec(id) {
    var s = data.charts[id];
    if (s.template) {
      var values = s.values;
      s = JSON.parse(JSON.stringify(data.templates[s.template]));
      s.data = {values: values};
    } else {
      s = JSON.parse(JSON.stringify(s));
    }
    return s;
  }
  function fitted(id, s, narrower) {
    // the panel named by usermeta.fit takes the width the other panels leave in the element
    var fit = s.usermeta && s.usermeta.fit;
    if (fit) {
      var room = document.getElementById(id).clientWidth;
      s.hconcat[fit.panel].width = Math.max(fit.min, Math.floor(room - fit.others - (narrower || 0)));
    }
    return s;
  }
  function draw(id, narrower) {
    var s = fitted(id, spec(id), narrower);
    if (views[id]) { views[id].finalize(); }
    return vegaEmbed('#' + id, s, opts).then(function (res) {
      views[id] = res;
      var fit = s.usermeta && s.usermeta.fit;
      if (fit && narrower === undefined) {
        // the other panels' labels took more (or less) room than guessed: measure once and draw again
        var el = document.getElementById(id), svg = el.querySelector('svg');
        var over = svg ? Math.ceil(svg.getBoundingClientRect().width - el.clientWidth) : 0;
        var width = s.hconcat[fit.panel].width;
        if ((over > 0 && width > fit.min) || over < -8) { return draw(id, over); }
      }
      if (page.onChart) { page.onChart(id, res.view); }
      return res;
    });
  }
  var ids = Object.keys(data.charts);
  var fits = ids.filter(function (id) { var s = data.charts[id]; return s.usermeta && s.usermeta.fit; });
  function settle(rounds) {
    // the page laid out again once its charts were in (it grew taller, a scrollbar took room): after two frames
    // a fitted chart wider than its element is drawn again, before the page says it is ready
    return new Promise(function (ok) { requestAnimationFrame(function () { requestAnimationFrame(ok); }); })
      .then(function () {
        var again = fits.filter(function (id) {
          var el = document.getElementById(id), svg = el.querySelector('svg');
          return svg && svg.getBoundingClientRect().width > el.clientWidth;
        });
        if (!again.length || rounds <= 0) { return null; }
        return Promise.all(again.map(function (id) { return draw(id); })).then(function () { return settle(rounds - 1); });
      });
  }
  Promise.all(ids.map(function (id) { return draw(id); })).then(function () { return settle(3); }).then(function () {
    document.body.setAttribute('data-ready', '1');
  }).catch(function (err) {
    document.body.setAttribute('data-ready', 'error');
    console.error('chart failed: ' + (err && err.message ? err.message : err));
  });
  var wide = window.innerWidth, timer = null, held = false;
  window.addEventListener('resize', function () {
    clearTimeout(timer);
    if (!fits.length) { return; }
    // not ready from the resize on (not from the redraw, 150 ms later): nobody reads a chart of the old width
    if (Math.abs(window.innerWidth - wide) >= 16 && document.body.getAttribute('data-ready') === '1') {
      document.body.setAttribute('data-ready', '');
      held = true;
    }
    timer = setTimeout(function () {
      if (Math.abs(window.innerWidth - wide) < 16) {
        if (held) { held = false; document.body.setAttribute('data-ready', '1'); }
        return;
      }
      held = false;
      wide = window.innerWidth;
      document.body.setAttribute('data-ready', '');
      Promise.all(fits.map(function (id) { return draw(id); })).then(function () { return settle(3); })
        .then(function () { document.body.setAttribute('data-ready', '1'); });
    }, 150);
  });
})();
""".replace("FONT", json_for_script(FONT))


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(t: datetime | None, with_date: bool = False) -> str:
    if t is None:
        return "no timestamp"
    return t.strftime("%Y-%m-%d %H:%M:%SZ" if with_date else "%H:%M:%SZ")


def chart_scripts(specs: Mapping[str, dict], bundle: str | None = None, page_script: str = "",
                  templates: Mapping[str, dict] | None = None, script_src: str | None = None) -> str:
    """The scripts that draw a page's charts: their specifications, the chart library (inlined from `bundle`, or
    loaded from `script_src`), the page's own script and the runtime."""
    data = {"charts": dict(specs), "templates": dict(templates or {})}
    library = f'<script src="{esc(script_src)}"></script>' if script_src else script_tag(bundle or "")
    return "\n".join([
        f'<script type="application/json" id="chart-specs">{json_for_script(data)}</script>',
        library,
        f"<script>{page_script}</script>" if page_script else "",
        f"<script>{RUNTIME}</script>",
    ])


def document(title: str, body: str, specs: Mapping[str, dict], bundle: str, page_script: str = "",
             templates: Mapping[str, dict] | None = None) -> str:
    """One self-contained HTML document."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        "</head><body>",
        body,
        chart_scripts(specs, bundle, page_script, templates),
        "</body></html>",
    ])
