"""History as a laboratory: `rules diff`, `reattribute`, `rules suggest` (docs/replay.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from attribution.cli import main, ruleset_of
from attribution.cli.db import open_store
from attribution.cli.diagnose import rules
from attribution.cli.times import FORMS, when

SINCE_HELP = f"Only jobs that ended from this time: {FORMS}"


@rules.command("diff")
@click.argument("new_pack", type=click.Path(path_type=Path))
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: totals by transition and the changed jobs.")
@click.pass_context
def rules_diff(ctx: click.Context, new_pack: Path, since: str | None, as_json: bool) -> None:
    """Re-derive the stored failed jobs' verdicts with NEW_PACK from their kept evidence; list each job whose
    outcome, root cause or culprits would change, with totals by transition."""
    from attribution.pipeline.history import replay
    from attribution.replay.diff import render_text, report
    from attribution.rulepack.load import load_rules

    pack = load_rules(new_pack)
    with open_store(ctx) as engine:
        changes, examined = replay(engine, pack, when("--since", since))
    if as_json:
        click.echo(json.dumps(report(changes, examined), indent=2))
    else:
        click.echo(render_text(changes, examined))


@main.command("reattribute")
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--rules", "rules_dir", type=click.Path(path_type=Path), default=None,
              help="The rule pack to apply (default: the one in use).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: totals by transition and the changed jobs.")
@click.pass_context
def reattribute_cmd(ctx: click.Context, since: str | None, rules_dir: Path | None, as_json: bool) -> None:
    """Give the stored failed jobs the verdicts of a rule pack, re-derived from their kept evidence (the earlier
    verdicts stay in the history; each records the pack version that made it)."""
    from attribution.pipeline.history import reattribute
    from attribution.replay.diff import render_text, report
    from attribution.rulepack.load import load_rules

    pack = load_rules(rules_dir) if rules_dir else ruleset_of(ctx)
    with open_store(ctx) as engine:
        changes, examined = reattribute(engine, pack, when("--since", since))
    if as_json:
        click.echo(json.dumps(report(changes, examined), indent=2))
    else:
        click.echo(render_text(changes, examined).replace("would change", "changed"))


@rules.command("suggest")
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--min-jobs", type=click.IntRange(1, None), default=3, show_default=True,
              help="Only templates seen in at least this many failed jobs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the templates with their skeletons.")
@click.pass_context
def rules_suggest(ctx: click.Context, since: str | None, min_jobs: int, as_json: bool) -> None:
    """Group the error-looking lines no rule matched in stored failed jobs into templates (Drain), ranked by
    failed GPU-hours and jobs, each with a rule skeleton (YAML, its example lines) to review."""
    from attribution.pipeline.history import unmatched_lines
    from attribution.replay.suggest import mine, render_text

    with open_store(ctx) as engine:
        lines = unmatched_lines(engine, ruleset_of(ctx), when("--since", since))
    templates = mine(lines, min_jobs)
    if as_json:
        click.echo(json.dumps({"lines": len(lines), "templates": [t.to_dict() for t in templates]}, indent=2))
    else:
        click.echo(render_text(templates))
