"""`attribution alerts send`: read what is new since the last run (current infrastructure verdicts, drain
decisions), turn each into an alert, and deliver to each sink what it is owed.

One run at a time (an advisory lock: a second run finds it held and leaves), in two steps:
- decide: each new row a sink wants becomes an alert; unless an alert with its key was decided within the
  cooldown, one pending delivery per sink that wants it is queued (attribution.alert_deliveries). The claim of
  the key, the deliveries and the stream's cursor move in one short transaction with no network in it: a row is
  decided once, whatever the sinks do.
- deliver: every pending delivery that is due, oldest first, each its own statement (no transaction stays open
  while a sink answers). A sink that took an alert is never sent it again; one that failed is tried again after
  `retry_seconds`, twice as long after each failure up to `retry_max_seconds`, `attempts` times in all, then given
  up (said, and kept in the store). A sink that fails is not tried again in the same run (one that is down costs
  one timeout per run); the other sinks' deliveries go on, so no alert waits for another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine

from attribution.alerts.messages import Alert, drain_alert, verdict_alert
from attribution.alerts.sinks import SinkError, deliver
from attribution.config.alerts import AlertSettings

#: pending deliveries read at a time
BATCH = 500


@dataclass
class SendReport:
    decided: list[tuple[Alert, tuple[str, ...]]] = field(default_factory=list)  # new alerts and their sinks
    sent: list[tuple[Alert, str]] = field(default_factory=list)  # (alert, sink) delivered in this run
    suppressed: int = 0  # within the cooldown of an alert already decided
    failed: list[str] = field(default_factory=list)  # deliveries that failed and will be tried again; the lock
    gave_up: list[str] = field(default_factory=list)  # deliveries that failed for the last time
    pending: dict[str, int] = field(default_factory=dict)  # deliveries still owed after the run, per sink


def retry_delay(failures: int, first: float, most: float) -> float:
    """Seconds to wait after the `failures`-th failed delivery of an alert to a sink: first, twice that, four
    times, ..., never more than `most`."""
    return min(most, first * 2.0 ** min(failures - 1, 60))


def send_new(engine: Engine, settings: AlertSettings, now: datetime, dry_run: bool = False) -> SendReport:
    """One run of `alerts send` at `now` (the caller's clock: the cooldown, the retries and the records use it)."""
    from attribution.store import alerts as store

    report = SendReport()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if not store.try_lock(conn):
            report.failed.append("another `alerts send` is running")
            return report
        try:
            _decide(engine, store, settings, now, dry_run, report)
            if not dry_run:
                _deliver_due(conn, store, settings, now, report)
            report.pending = store.pending(conn)
        finally:
            store.unlock(conn)
    return report


def _decide(engine: Engine, store, settings: AlertSettings, now: datetime, dry_run: bool,
            report: SendReport) -> None:
    streams = (
        ("verdicts", "verdict", store.new_verdicts, verdict_alert, lambda r: r["current"]),
        ("drain_actions", "drain", store.new_drain_actions, drain_alert,
         lambda r: r["decision"] in store.DRAIN_DECISIONS),
    )
    for stream, event, read, make, wanted in streams:
        with engine.begin() as tx:
            rows = read(tx, store.cursor(tx, stream), settings.max_per_run)
            for row in rows:
                if not wanted(row):
                    continue
                sinks = tuple(s.id for s in settings.sinks if event in s.events
                              and (event != "verdict" or row["outcome"] in s.outcomes))
                if not sinks:
                    continue
                alert = make(row, settings.dashboard_url)
                if dry_run:
                    report.decided.append((alert, sinks))
                elif store.claim(tx, alert.key, settings.cooldown_seconds, now):
                    store.queue(tx, alert.key, alert.as_dict(), sinks, now)
                    report.decided.append((alert, sinks))
                else:
                    report.suppressed += 1
            if rows and not dry_run:
                store.advance(tx, stream, rows[-1]["id"])


def _deliver_due(conn, store, settings: AlertSettings, now: datetime, report: SendReport) -> None:
    sinks = {s.id: s for s in settings.sinks}
    down: set[str] = set()
    after = 0
    while True:
        batch = store.due(conn, now, after, sorted(down), BATCH)
        if not batch:
            return
        for d in batch:
            after = d["id"]
            if d["sink"] in down:
                continue
            alert = Alert.from_dict(d["alert"])
            sink = sinks.get(d["sink"])
            if sink is None:
                problem = f"{d['sink']}: no sink of that name is configured any more"
                store.failed(conn, d["id"], problem, None, now)
                report.gave_up.append(f"{problem}: gave up {alert.key}")
                continue
            try:
                deliver(sink, alert, d["created_at"])
            except SinkError as exc:
                down.add(sink.id)
                failures = d["attempts"] + 1
                if failures >= settings.attempts:
                    store.failed(conn, d["id"], str(exc), None, now)
                    report.gave_up.append(f"{exc} (gave up {alert.key} after {failures} attempt(s))")
                else:
                    wait = retry_delay(failures, settings.retry_seconds, settings.retry_max_seconds)
                    store.failed(conn, d["id"], str(exc), now + timedelta(seconds=wait), now)
                    report.failed.append(f"{exc} (attempt {failures} of {settings.attempts}, {alert.key}; "
                                         f"again in {wait:g} s)")
                continue
            store.delivered(conn, d["id"], now)
            report.sent.append((alert, sink.id))
