"""A job's timeline as one self-contained HTML file, from a Diagnosis or from a stored verdict document.

`attribution diagnose BUNDLE --html OUT` calls `write_timeline`; `attribution report job` calls
`write_document_timeline` with what the store kept. Both draw the same page (attribution/reports/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from attribution.model import Event
from attribution.reports.files import write_html


def render_timeline(doc: Mapping, events: Iterable[Event] = (), bundle: str | None = None,
                    margin_seconds: int = 300, palette=None) -> str:
    """The page's HTML for a verdict document (docs/verdict.md) and the job's events.

    `bundle` is the chart library's JavaScript (pages.vega.script_bundle()); pass it when writing many pages.
    `palette` (reports.palette.Palette): the colours of the kinds; the shipped rule pack's by default.
    """
    from attribution.reports.timeline_data import build_timeline
    from attribution.reports.timeline_page import timeline_html
    from attribution.reports.vega import script_bundle

    timeline = build_timeline(doc, events, margin_seconds=margin_seconds)
    return timeline_html(timeline, bundle if bundle is not None else script_bundle(), palette)


def write_timeline(diagnosis, path: Path, bundle: str | None = None) -> Path:
    """The timeline of a Diagnosis (pipeline.diagnose_bundle) written to `path`."""
    from attribution.reports.render import verdict_to_dict

    doc = verdict_to_dict(diagnosis.verdict)
    return write_html(path, render_timeline(doc, diagnosis.events, bundle))


def write_document_timeline(doc: Mapping, events: Iterable[Event], path: Path, bundle: str | None = None) -> Path:
    """The timeline of a stored job: its verdict document and the events linked to it."""
    return write_html(path, render_timeline(doc, events, bundle))
