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
              help="One JSON object: dry_run, the alerts (event, key, summary, labels, details, link, sinks), "
                   "suppressed, pending (deliveries still owed, by sink), failed, gave_up.")
@click.pass_context
def alerts_send(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Send an alert for each infrastructure verdict and drain decision stored since the last run, once per key
    (node, outcome, kind) and cooldown, to each sink once; a sink that failed before is tried again when its wait
    is over. Exits 3 when a sink did not take an alert (tried again on a later run) or was given up on."""
    from datetime import datetime, timezone

    from attribution.alerts.dispatch import send_new

    settings = _alert_settings(ctx)
    with open_store(ctx) as engine:
        report = send_new(engine, settings, datetime.now(timezone.utc), dry_run=dry_run)
    if as_json:
        import dataclasses
        import json

        if dry_run:
            alerts = [dataclasses.asdict(a) | {"sinks": list(sinks)} for a, sinks in report.decided]
        else:
            by_key: dict = {}
            for alert, sink in report.sent:
                by_key.setdefault(alert.key, dataclasses.asdict(alert) | {"sinks": []})["sinks"].append(sink)
            alerts = list(by_key.values())
        click.echo(json.dumps({"dry_run": dry_run, "alerts": alerts, "suppressed": report.suppressed,
                               "pending": dict(sorted(report.pending.items())), "failed": list(report.failed),
                               "gave_up": list(report.gave_up)}, indent=2, default=str))
    elif dry_run:
        for alert, sinks in report.decided:
            click.echo(f"would send {alert.summary} (to {', '.join(sinks)})")
    else:
        to: dict[str, tuple] = {}
        for alert, sink in report.sent:
            summary, sinks = to.get(alert.key, (alert.summary, []))
            to[alert.key] = (summary, sinks + [sink])
        for summary, sinks in to.values():
            click.echo(f"sent {summary} (to {', '.join(sinks)})")
    owed = ", ".join(f"{n} to {sink}" for sink, n in sorted(report.pending.items()))
    click.echo(f"{len(report.decided)} new alert(s){' to send' if dry_run else ''}, {len(report.sent)} "
               f"delivery(ies), {report.suppressed} within their cooldown"
               + (f"; still owed: {owed}" if owed else ""), err=True)
    for problem in report.failed + report.gave_up:
        click.echo(f"attribution: alerts: {problem}", err=True)
    if report.failed or report.gave_up:
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
            click.echo(f"{sink.id}: ok")
        except SinkError as exc:  # its message has no credential in it
            failed += 1
            click.echo(f"attribution: alerts: {exc}", err=True)
    if failed:
        raise SystemExit(3)
