"""`attribution alerts send` (for a timer) and `attribution alerts test`: new infrastructure verdicts and drain
decisions to the sinks of the configuration's `alerts:` section."""

from __future__ import annotations

import click

from attribution.cli import main, settings_of
from attribution.cli.db import open_store


def _alert_settings(ctx: click.Context):
    from attribution.errors import ConfigError

    s = settings_of(ctx).alerts
    if s is None or not s.sinks:
        raise ConfigError(f"{settings_of(ctx).source or 'the configuration'}: no alerts.sinks configured")
    return s


@main.group("alerts")
def alerts_group() -> None:
    """Alerts: new infrastructure verdicts and drain decisions to a webhook, Slack or Alertmanager."""


@alerts_group.command("send")
@click.option("--dry-run", is_flag=True, help="Print what would be sent; send nothing, move no cursor.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: dry_run, the alerts (event, key, summary, labels, details, link), suppressed, "
                   "failed.")
@click.pass_context
def alerts_send(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Send an alert for each infrastructure verdict and drain decision stored since the last run, once per key
    (node, outcome, kind) and cooldown. Exits 3 when a sink could not be reached (tried again next run)."""
    from attribution.alerts.dispatch import send_new

    settings = _alert_settings(ctx)
    with open_store(ctx) as engine:
        report = send_new(engine, settings, dry_run=dry_run)
    if as_json:
        import dataclasses
        import json

        click.echo(json.dumps({"dry_run": dry_run, "alerts": [dataclasses.asdict(a) for a in report.sent],
                               "suppressed": report.suppressed, "failed": list(report.failed)}, indent=2, default=str))
    else:
        for a in report.sent:
            click.echo(("would send " if dry_run else "sent ") + a.summary)
    click.echo(f"{len(report.sent)} alert(s) {'to send' if dry_run else 'sent'}, {report.suppressed} within "
               f"their cooldown", err=True)
    for problem in report.failed:
        click.echo(f"attribution: alerts: {problem}", err=True)
    if report.failed:
        raise SystemExit(3)


@alerts_group.command("test")
@click.pass_context
def alerts_test(ctx: click.Context) -> None:
    """Send one test alert to every sink, to check the wiring."""
    from datetime import datetime, timezone

    from attribution.alerts.messages import Alert
    from attribution.alerts.sinks import SinkError, deliver

    settings = _alert_settings(ctx)
    alert = Alert("verdict", "test", "attribution test alert: the wiring works",
                  {"cluster": "test", "node": "test", "outcome": "test", "kind": "test"}, {"explanation": "test"})
    failed = 0
    for sink in settings.sinks:
        try:
            deliver(sink, alert, datetime.now(timezone.utc))
            click.echo(f"{sink.type}: ok")
        except SinkError as exc:
            failed += 1
            click.echo(f"attribution: alerts: {exc}", err=True)
    if failed:
        raise SystemExit(3)
