"""The fleet report as a static folder (index.html, self-contained), from the store's views.

`attribution report fleet --weeks N --out DIR` calls `write_fleet_report`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine

from attribution.reports.files import write_html


def write_fleet_report(engine: Engine, out_dir: Path, weeks: int = 8, until: datetime | None = None,
                       bundle: str | None = None) -> Path:
    """Write DIR/index.html for the `weeks` ISO weeks up to the week of `until` (default: now); returns its path."""
    from attribution.reports.fleet_page import fleet_html
    from attribution.reports.vega import script_bundle
    from attribution.store.reports import fleet_data

    data = fleet_data(engine, weeks=weeks, until=until)
    html = fleet_html(data, bundle if bundle is not None else script_bundle())
    return write_html(Path(out_dir) / "index.html", html)
