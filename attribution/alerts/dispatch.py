"""`attribution alerts send`: read what is new since the last run (current infrastructure verdicts, drain
decisions), turn each into an alert, claim its key for the cooldown and deliver it to every sink that wants it.

One run at a time (an advisory lock: a second run finds it held and leaves), each step its own short statement
(no transaction stays open while a sink answers). At most once per key and cooldown (the claim is one atomic
upsert). A delivery that fails releases its key and stops its stream's cursor there, so the next run tries it
again (a sink that had already taken it may get it twice); a cursor only moves past what was handled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import Engine

from attribution.alerts.messages import Alert, drain_alert, verdict_alert
from attribution.alerts.sinks import SinkError, deliver
from attribution.config.alerts import AlertSettings

UTC = timezone.utc


@dataclass
class SendReport:
    sent: list[Alert] = field(default_factory=list)
    suppressed: int = 0  # within the cooldown of an alert already sent
    failed: list[str] = field(default_factory=list)


def send_new(engine: Engine, settings: AlertSettings, dry_run: bool = False) -> SendReport:
    from attribution.store import alerts as store

    report = SendReport()
    now = datetime.now(UTC)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if not store.try_lock(conn):
            report.failed.append("another `alerts send` is running")
            return report
        try:
            _streams(conn, store, settings, now, dry_run, report)
        finally:
            store.unlock(conn)
    return report


def _streams(conn, store, settings: AlertSettings, now, dry_run: bool, report: SendReport) -> None:
    from attribution.store.alerts import DRAIN_DECISIONS

    streams = (
        ("verdicts", "verdict", store.new_verdicts, verdict_alert,
         lambda r: r["current"] and any(r["outcome"] in s.outcomes for s in settings.sinks)),
        ("drain_actions", "drain", store.new_drain_actions, drain_alert, lambda r: r["decision"] in DRAIN_DECISIONS),
    )
    for stream, event, read, make, wanted in streams:
        after = store.cursor(conn, stream)
        done = after
        for row in read(conn, after, settings.max_per_run):
            if wanted(row):
                alert = make(row, settings.dashboard_url)
                sinks = [s for s in settings.sinks if event in s.events
                         and (event != "verdict" or row["outcome"] in s.outcomes)]
                if sinks and not _send(conn, store, alert, sinks, settings, now, dry_run, report):
                    break  # try this one again next time; nothing after it is marked handled
            done = row["id"]
        if not dry_run and done > after:
            store.advance(conn, stream, done)


def _send(conn, store, alert: Alert, sinks, settings: AlertSettings, now, dry_run: bool, report: SendReport) -> bool:
    if dry_run:
        report.sent.append(alert)
        return True
    if not store.claim(conn, alert.key, settings.cooldown_seconds):
        report.suppressed += 1
        return True
    try:
        for sink in sinks:
            deliver(sink, alert, now)
    except SinkError as exc:
        store.release(conn, alert.key)
        report.failed.append(str(exc))
        return False
    report.sent.append(alert)
    return True
