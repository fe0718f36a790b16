"""History as a laboratory: `rules diff`, `reattribute`, `rules suggest` (docs/replay.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import click

from attribution.cli import main, ruleset_of
from attribution.cli.db import open_store
from attribution.cli.diagnose import rules

UTC = timezone.utc
SINCE_HELP = "Only jobs that ended from this time: ISO 8601 or now-30d, yesterday, ..."


def when(option: str, value: str | None) -> datetime | None:
    from attribution.errors import InputError
    from attribution.timeparse import TimeError, parse_when

    if value is None:
        return None
    try:
        return parse_when(value, datetime.now(UTC))
    except TimeError as exc:
        raise InputError(option, str(exc)) from None


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


def _policy_file(ctx: click.Context, path: Path | None):
    """The drain policy of a file (drain-policy.yaml's format), checked with the rule pack in use; or the pack's."""
    import shutil
    import tempfile

    from attribution.drain.policy import PolicyError, load_policy
    from attribution.errors import InputError
    from attribution.rulepack.load import load_rules

    base = ruleset_of(ctx)
    try:
        if path is None:
            return load_policy(base)
        if not path.is_file():
            raise InputError(str(path), "no such policy file")
        with tempfile.TemporaryDirectory(prefix="attribution-policy-") as tmp:
            pack = Path(tmp) / "rules"
            shutil.copytree(base.root, pack)
            for old in pack.rglob("*.yaml"):
                if "type: drain_policy" in old.read_text(encoding="utf-8"):
                    old.unlink()
            shutil.copy(path, pack / "drain-policy.yaml")
            return load_policy(load_rules(pack))
    except PolicyError as exc:
        raise InputError(str(path or "drain policy"), "; ".join(exc.problems)) from None


@click.command("backtest")
@click.option("--policy", "policies", multiple=True, type=click.Path(path_type=Path),
              help="A drain policy file (drain-policy.yaml's format); twice to compare two side by side "
                   "(default: the rule pack's).")
@click.option("--since", required=True, help="Start of the period (ISO 8601 or now-30d, ...).")
@click.option("--until", default=None, help="End of the period (default: now).")
@click.option("--cluster", default=None, help="Only this cluster.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def drain_backtest(ctx: click.Context, policies, since: str, until: str | None, cluster: str | None,
                   as_json: bool) -> None:
    """Replay drain policies over a past period: when each node would have been drained, the later failed jobs
    (and GPU-hours) on it that would have been prevented, the node-hours it would have cost."""
    from attribution.errors import InputError
    from attribution.store.backtest import backtest, render_text

    t1 = when("--since", since)
    t2 = when("--until", until) or datetime.now(UTC)
    if t2 <= t1:
        raise InputError("--until", "must be after --since")
    chosen = [(str(p), _policy_file(ctx, p)) for p in policies] or [("rules", _policy_file(ctx, None))]
    with open_store(ctx) as engine:
        results = backtest(engine, chosen, t1, t2, cluster)
    if as_json:
        click.echo(json.dumps({"since": t1.isoformat(), "until": t2.isoformat(),
                               "policies": [b.to_dict() for b in results]}, indent=2))
    else:
        click.echo(render_text(results))


def _register_drain() -> None:
    from attribution.cli.drain import drain

    drain.add_command(drain_backtest)


_register_drain()
