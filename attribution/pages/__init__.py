"""pages: the pictures people look at, as self-contained HTML files (a job timeline, a fleet report).

Every page is one file that opens with no network: its CSS and the chart library's JavaScript are inlined.
Charts are Vega-Lite specifications built with Altair; the Vega, Vega-Lite and vega-embed JavaScript comes from
the installed vl-convert package (see `vega.py`). Nothing here reads a database or a bundle: the callers pass
values in (`files.py` writes the finished page).
"""
