"""alerts/dispatch.py on a real store and real HTTP receivers, with the run's clock given: a sink that fails waits
60 s, then twice as long each time up to the cap, is given up after `attempts`, and a sink no longer configured is
given up at once; a run that fails for one sink goes on for the others."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from attribution.alerts.dispatch import retry_delay, send_new
from attribution.config.alerts import AlertSettings, SinkSettings
from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import INCIDENTS
from tests.harness.receiver import Receiver

T0 = datetime(2027, 1, 20, 12, 0, tzinfo=timezone.utc)


def _settings(receiver: Receiver, **kw) -> AlertSettings:
    return AlertSettings(sinks=(SinkSettings(type="webhook", url=receiver.url + "/hook"),
                                SinkSettings(type="slack", url=receiver.url + "/slack")), **kw)


def _deliveries(store) -> list[tuple]:
    with store.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "SELECT sink, attempts, delivered_at IS NOT NULL, gave_up_at IS NOT NULL, next_attempt_at "
            "FROM attribution.alert_deliveries ORDER BY id"))]


def test_the_wait_doubles_up_to_its_cap():
    assert [retry_delay(n, 60, 600) for n in range(1, 7)] == [60, 120, 240, 480, 600, 600]
    assert retry_delay(1000, 60, 3600) == 3600


def test_a_failed_sink_waits_and_is_tried_again_when_its_wait_is_over(ruleset, store, receiver):
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    settings = _settings(receiver, retry_seconds=60, retry_max_seconds=600)
    receiver.failing.add("/slack")
    r = send_new(store, settings, T0)
    assert [s for _, s in r.sent] == ["webhook"] and len(r.failed) == 1 and r.pending == {"slack": 1}
    assert _deliveries(store)[1] == ("slack", 1, False, False, T0 + timedelta(seconds=60))
    send_new(store, settings, T0 + timedelta(seconds=59))
    assert receiver.hits["/slack"] == 1  # not due yet
    r = send_new(store, settings, T0 + timedelta(seconds=60))
    assert receiver.hits["/slack"] == 2 and "attempt 2 of 10" in r.failed[0] and "again in 120 s" in r.failed[0]
    receiver.failing.clear()
    r = send_new(store, settings, T0 + timedelta(seconds=180))
    assert [s for _, s in r.sent] == ["slack"] and r.pending == {} and not r.failed
    assert [d[:4] for d in _deliveries(store)] == [("webhook", 1, True, False), ("slack", 3, True, False)]
    assert len(receiver.posts["/hook"]) == 1 and len(receiver.posts["/slack"]) == 1


def test_a_sink_is_given_up_after_its_attempts_and_the_others_go_on(ruleset, store, receiver):
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    settings = _settings(receiver, attempts=2, retry_seconds=0)
    receiver.failing.add("/slack")
    assert len(send_new(store, settings, T0).failed) == 1
    r = send_new(store, settings, T0 + timedelta(seconds=1))
    assert not r.failed and len(r.gave_up) == 1 and "gave up verdict:helios:hx-gpu019" in r.gave_up[0]
    assert "after 2 attempt(s)" in r.gave_up[0] and r.pending == {}
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    receiver.failing.clear()
    r = send_new(store, settings, T0 + timedelta(seconds=2))  # the new alert goes to both; the old one stays given up
    assert sorted(s for _, s in r.sent) == ["slack", "webhook"] and r.pending == {}
    assert [p["text"].split(" ")[0] for p in receiver.posts["/slack"]] == ["nvlink"]
    assert [d[:4] for d in _deliveries(store)] == [("webhook", 1, True, False), ("slack", 2, False, True),
                                                  ("webhook", 1, True, False), ("slack", 1, True, False)]
    with store.connect() as c:
        error = c.execute(text("SELECT last_error FROM attribution.alert_deliveries WHERE gave_up_at IS NOT NULL")
                          ).scalar_one()
    assert error.startswith("slack (slack, http://127.0.0.1:") and "HTTP 500" in error


def test_deliveries_to_a_sink_that_is_no_longer_configured_are_given_up(ruleset, store, receiver):
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    receiver.failing.add("/slack")
    send_new(store, _settings(receiver), T0)
    only_webhook = AlertSettings(sinks=(SinkSettings(type="webhook", url=receiver.url + "/hook"),))
    r = send_new(store, only_webhook, T0 + timedelta(hours=1))
    assert r.gave_up == ["slack: no sink of that name is configured any more: gave up "
                         "verdict:kestrel:kes-n203:nvlink:nvlink_error"]
    assert receiver.hits == {"/hook": 1, "/slack": 1}


def test_a_dry_run_decides_nothing(ruleset, store, receiver):
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    r = send_new(store, _settings(receiver), T0, dry_run=True)
    assert [sinks for _, sinks in r.decided] == [("webhook", "slack")] and receiver.hits == {}
    assert _deliveries(store) == []
    r = send_new(store, _settings(receiver), T0)
    assert len(r.decided) == 1 and len(r.sent) == 2
