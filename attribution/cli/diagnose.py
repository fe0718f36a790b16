"""`attribution diagnose` and `attribution rules check`: the offline commands (no database)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import EXIT_PROBLEMS, main, ruleset_of


@main.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict JSON (spec/verdict.md).")
@click.option("--max-symptoms", type=int, default=None, help="List at most this many symptoms (all by default).")
@click.pass_context
def diagnose(ctx: click.Context, bundle: Path, as_json: bool, max_symptoms: int | None) -> None:
    """Diagnose one incident bundle offline (no database). Exit 0 whatever the outcome."""
    from ..pipeline import diagnose_bundle
    from ..render import render_text, verdict_to_dict

    d = diagnose_bundle(ruleset_of(ctx), bundle)
    if as_json:
        click.echo(json.dumps(verdict_to_dict(d.verdict, symptom_limit=max_symptoms), indent=2))
    else:
        click.echo(render_text(d.verdict))


@main.group()
def rules() -> None:
    """Rule pack commands."""


@rules.command("check")
@click.argument("directory", type=click.Path(path_type=Path), required=False)
def rules_check(directory: Path | None) -> None:
    """Validate a rule pack; every problem printed as path:line: message; exit 1 if any."""
    from ..rulecheck import check_pack

    problems, summary = check_pack(directory)
    for p in problems:
        click.echo(p)
    if problems:
        click.echo(f"{len(problems)} problem(s)", err=True)
        sys.exit(EXIT_PROBLEMS)
    click.echo(summary)
