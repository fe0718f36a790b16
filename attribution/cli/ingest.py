"""`attribution ingest`: diagnose and store incident bundles (folders, .tar.gz archives, folders of either)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from attribution.cli import main, ruleset_of
from attribution.cli.bundles import NOT_A_BUNDLE, bundle_paths, opened
from attribution.cli.db import open_store


@main.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--keep-going", is_flag=True,
              help="Go on past a bundle that cannot be read or stored; exit 2 at the end if any could not.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object at the end: each bundle stored, skipped or failed, and the totals.")
@click.pass_context
def ingest(ctx: click.Context, bundles: tuple[Path, ...], keep_going: bool, as_json: bool) -> None:
    """Diagnose and store incident bundles (idempotent: ingesting again adds nothing).

    Each BUNDLE is a bundle folder, a bundle as .tar.gz, or a folder of bundle folders and archives; anything else
    is skipped with a note. Prints one line per bundle (with its place among them) and a summary."""
    from attribution.errors import InputError
    from attribution.pipeline.ingest import ingest_bundle

    found, skipped = bundle_paths(bundles)
    for p in skipped:
        click.echo(f"note: {p}: skipped, {NOT_A_BUNDLE}", err=True)
    rs = ruleset_of(ctx)
    rows: list[dict] = []
    failed: list[dict] = []
    with open_store(ctx) as engine:
        for i, b in enumerate(found, start=1):
            place = f"[{i}/{len(found)}] " if len(found) > 1 else ""
            try:
                with opened(b) as folder:
                    result, verdict = ingest_bundle(rs, engine, folder)
            except InputError as exc:
                if not keep_going:
                    raise
                click.echo(f"attribution: {exc}", err=True)
                failed.append({"bundle": str(b), "problem": str(exc)})
                continue
            row = {"bundle": str(b), "cluster": result.job.cluster, "job_id": result.job.job_id,
                   "outcome": verdict.outcome if verdict else None, "new_events": result.new_events,
                   "verdict_changed": result.verdict_changed}
            rows.append(row)
            if not as_json:
                outcome = row["outcome"] or "(attributed by another process)"
                click.echo(f"{place}{b}: {outcome:<16} {result.new_events:>5} new event(s), "
                           f"{'new verdict' if result.verdict_changed else 'verdict unchanged'}")
    totals = {"stored": len(rows), "new_events": sum(r["new_events"] for r in rows),
              "new_verdicts": sum(r["verdict_changed"] for r in rows), "skipped": len(skipped), "failed": len(failed)}
    if as_json:
        click.echo(json.dumps({"bundles": rows, "skipped": [str(p) for p in skipped], "failed": failed,
                               "totals": totals}, indent=2))
    elif len(found) > 1 or skipped or failed:
        click.echo(f"ingested {totals['stored']} bundle(s): {totals['new_events']} new event(s), "
                   f"{totals['new_verdicts']} new verdict(s)"
                   + (f"; skipped {len(skipped)}" if skipped else "") + (f"; {len(failed)} failed" if failed else ""),
                   err=True)
    if failed:
        raise SystemExit(2)
