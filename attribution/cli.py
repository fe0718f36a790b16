"""The command line. The only place (with the hooks and the API) where errors become exit codes.

Exit codes: 0 done (whatever the verdict), 1 a check found problems, 2 bad input or configuration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .errors import AttributionError, ConfigError, InputError, RulePackError, StoreError

EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2


class _Group(click.Group):
    """Turns domain errors into one clear line on stderr and exit code 2, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RulePackError as exc:
            for p in exc.problems:
                click.echo(p, err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (InputError, ConfigError) as exc:
            click.echo(f"attribution: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except StoreError as exc:
            click.echo(f"attribution: database: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except AttributionError as exc:
            click.echo(f"attribution: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)


@click.group(cls=_Group)
@click.option("--rules", "rules_dir", type=click.Path(path_type=Path), default=None, envvar="ATTRIBUTION_RULES",
              help="Rule pack directory (default: the rules shipped with attribution).")
@click.pass_context
def main(ctx: click.Context, rules_dir: Path | None) -> None:
    """attribution: for every failed GPU training job, what actually broke."""
    ctx.obj = {"rules_dir": rules_dir}


def _ruleset(ctx: click.Context):
    from .rulepack import load_rules

    cached = ctx.obj.get("ruleset")
    if cached is None:
        cached = load_rules(ctx.obj.get("rules_dir"))
        ctx.obj["ruleset"] = cached
    return cached


@main.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict JSON (spec/verdict.md).")
@click.option("--max-symptoms", type=int, default=None, help="List at most this many symptoms (all by default).")
@click.pass_context
def diagnose(ctx: click.Context, bundle: Path, as_json: bool, max_symptoms: int | None) -> None:
    """Diagnose one incident bundle offline (no database). Exit 0 whatever the outcome."""
    from .pipeline import diagnose_bundle
    from .render import render_text, verdict_to_dict

    d = diagnose_bundle(_ruleset(ctx), bundle)
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
    from .rulecheck import check_pack

    problems, summary = check_pack(directory)
    for p in problems:
        click.echo(p)
    if problems:
        click.echo(f"{len(problems)} problem(s)", err=True)
        sys.exit(EXIT_PROBLEMS)
    click.echo(summary)


if __name__ == "__main__":  # pragma: no cover
    main()
