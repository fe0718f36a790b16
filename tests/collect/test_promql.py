"""collect/promql.py: the metric rules' series from a real Prometheus (Debian's package, started by the test setup
with its history backfilled by promtool), and what a Prometheus that is down, slow or failing leaves in coverage."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from attribution.collect.httpclient import endpoint_from
from attribution.collect.promql import PromAnswerError, choose_step, collect_metrics, parse_matrix, series_query
from attribution.config import PrometheusSettings
from attribution.extract.metrics import metric_rules
from attribution.model import ExecutionContext

from tests.harness.incident_sources import dcgm_history
from tests.harness.loki import Blackhole, FakeLoki
from tests.harness.prometheus import PrometheusHarnessError, PrometheusServer, openmetrics

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 2, 11, tzinfo=UTC)
END = datetime(2026, 3, 10, 9, 24, 57, tzinfo=UTC)
NODES = ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")
CTX = ExecutionContext(cluster="helios", job_id="731842", nodes=NODES, start=START, end=END)
WINDOW = (START - timedelta(minutes=5), END + timedelta(minutes=5))


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    history = dcgm_history(NODES[:3] + ("hx-gpu099",), START - timedelta(minutes=30), END + timedelta(minutes=20),
                           xid_at={("hx-gpu019", 4): (datetime(2026, 3, 10, 9, 14, 45, tzinfo=UTC), 79)},
                           stuck={("hx-gpu017", 2): 48})
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), openmetrics(history))
    try:
        server.install()
    except PrometheusHarnessError as exc:
        pytest.skip(str(exc))
    server.start()
    yield server
    server.stop()


def _collect(url, ruleset, **kw):
    s = PrometheusSettings(url=url, **kw)
    return collect_metrics(endpoint_from(s, "prometheus"), s, metric_rules(ruleset, s.labels), CTX, *WINDOW,
                           time.monotonic() + s.budget)


def test_the_query_selects_the_jobs_nodes_short_or_fully_qualified():
    q = series_query("DCGM_FI_DEV_XID_ERRORS", "Hostname", ("b.x", "a"), 'job="dcgm"')
    assert q == 'DCGM_FI_DEV_XID_ERRORS{Hostname=~"(a|b\\\\.x)(\\\\..*)?", job="dcgm"}'


def test_the_step_is_raised_when_the_window_needs_more_points_than_prometheus_allows():
    assert choose_step(START, END, 15) == 15
    assert choose_step(START, START + timedelta(days=30), 15) == 236


def test_error_and_non_matrix_answers_are_refused():
    with pytest.raises(PromAnswerError, match="bad_data|parse error"):
        parse_matrix(json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())
    with pytest.raises(PromAnswerError, match="matrix"):
        parse_matrix(json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode())


@pytest.mark.prometheus
def test_series_of_the_jobs_nodes_come_back_with_their_samples(prom, ruleset):
    series, cov = _collect(prom.url, ruleset)
    names = {s.name for s in series}
    assert names == {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    hosts = {s.labels["Hostname"] for s in series}
    assert hosts == {"hx-gpu017", "hx-gpu018", "hx-gpu019"}  # hx-gpu099 is not the job's
    xid = next(s for s in series if s.name == "DCGM_FI_DEV_XID_ERRORS" and s.labels["Hostname"] == "hx-gpu019"
               and s.labels["gpu"] == "4")
    assert xid.labels["pci_bus_id"] == "00000000:9D:00.0"
    assert xid.samples[0] == (WINDOW[0].timestamp(), 0.0)
    change = datetime(2026, 3, 10, 9, 14, 45, tzinfo=UTC).timestamp()
    assert {v for t, v in xid.samples if t < change} == {0.0}
    assert {v for t, v in xid.samples if t >= change + 30} == {79.0}  # one scrape later at the latest
    status = {c.node: c.status for c in cov}
    assert status == {"hx-gpu017": "ok", "hx-gpu018": "ok", "hx-gpu019": "ok", "hx-gpu020": "empty"}


@pytest.mark.prometheus
def test_label_names_are_configurable(prom, ruleset):
    series, cov = _collect(prom.url, ruleset, labels={"node": "instance_host"})
    assert series == [] and all(c.status == "empty" for c in cov)


@pytest.mark.prometheus
def test_a_query_prometheus_refuses_is_a_coverage_error_with_its_reason(prom, ruleset):
    series, cov = _collect(prom.url, ruleset, matchers='job=~"("')
    assert series == []
    assert all(c.status == "error" for c in cov)
    assert "HTTP 400: bad_data" in cov[0].reason


def test_a_prometheus_that_is_down_slow_or_hung_is_reported_within_the_time_limit(ruleset):
    with Blackhole() as hole:
        t = time.monotonic()
        _, cov = _collect(hole.url, ruleset, timeout=0.5)
        assert time.monotonic() - t < 2
        assert cov[0].status == "error" and "within 0.5 s" in cov[0].reason
        assert "not queried" in cov[0].notes[0]
    url = hole.url
    _, cov = _collect(url, ruleset)
    assert "connection refused" in cov[0].reason
    with FakeLoki(delay=5) as slow:  # any HTTP server that takes too long
        t = time.monotonic()
        _, cov = _collect(slow.url, ruleset, timeout=30, budget=0.5)
        assert time.monotonic() - t < 2
        assert cov[0].status == "error"


def test_an_answer_that_is_not_prometheus_is_a_coverage_error(ruleset):
    with FakeLoki() as other:  # answers 404 to /api/v1/query_range
        _, cov = _collect(other.url, ruleset)
    assert cov[0].status == "error" and "HTTP 404" in cov[0].reason
