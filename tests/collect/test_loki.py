"""collect/loki.py: LogQL query_range per node and source, paged with Loki's limit/direction semantics, against the
fake Loki of tests/harness/loki.py (no real Loki can run here: docs/slurm.md section 3)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from attribution.collect.httpclient import endpoint_from
from attribution.collect.loki import (LokiAnswerError, Pager, Stream, collect_loki, logql_quote, parse_streams,
                                      stream_selector)
from attribution.config import LokiSettings
from attribution.model import ExecutionContext

from tests.harness.loki import Blackhole, FakeLoki, parse_logql, utc_ns
from tests.harness.prefilters import AllLines

UTC = timezone.utc
T0 = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
CTX = ExecutionContext(cluster="c", job_id="42", nodes=("n1", "n2"), start=T0, end=T0 + timedelta(hours=1))
WINDOW = (T0 - timedelta(minutes=5), T0 + timedelta(hours=1, minutes=5))


def _all(source):
    return AllLines()


def _collect(loki_url, **kw):
    s = LokiSettings(url=loki_url, **kw)
    return collect_loki(endpoint_from(s, "loki"), s, CTX, _all, *WINDOW, time.monotonic() + s.budget)


def _page(*streams):
    return [Stream(tuple(sorted(labels.items())), tuple(entries)) for labels, entries in streams]


# -- the pure parts -------------------------------------------------------------------------------------------


def test_default_selectors_use_the_configured_label_names_and_quote_values():
    s = LokiSettings(node_label="hostname", source_label="log", job_label="slurm_job")
    assert stream_selector(s, "kernel", CTX, "n1") == '{hostname="n1", log="kernel"}'
    assert stream_selector(s, "job", CTX) == '{slurm_job="42", log="job"}'
    assert logql_quote('a"b\\c') == '"a\\"b\\\\c"'


def test_a_configured_selector_is_a_template_with_quoted_values():
    s = LokiSettings(selectors={"kernel": '{node=$node, unit="kernel"} |= "NVRM"',
                                "job": '{cluster="$cluster", job="$job_id"}'})
    assert stream_selector(s, "kernel", CTX, "n1") == '{node="n1", unit="kernel"} |= "NVRM"'
    assert stream_selector(s, "job", CTX) == '{cluster="c", job="42"}'


def test_answers_that_are_not_log_streams_are_refused():
    with pytest.raises(LokiAnswerError, match="resultType"):
        parse_streams(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode())
    with pytest.raises(LokiAnswerError, match="not JSON"):
        parse_streams(b"<html>")
    with pytest.raises(LokiAnswerError, match="nanoseconds"):
        parse_streams(json.dumps({"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": {}, "values": [["12.5s", "x"]]}]}}).encode())


def test_timestamps_are_nanosecond_strings():
    body = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"host": "n1"}, "values": [["1773133200123456789", "a"], ["1773133200123456790", "b"]]}]}}
    (s,) = parse_streams(json.dumps(body).encode())
    assert s.entries == ((1773133200123456789, "a"), (1773133200123456790, "b"))
    assert s.label("host") == "n1"


def test_forward_paging_restarts_at_the_last_timestamp_and_drops_what_it_saw():
    p = Pager(start=0, end=100, limit=3)
    p.add_page(_page(({"s": "a"}, [(1, "x"), (5, "y")]), ({"s": "b"}, [(5, "z")])))
    assert not p.done and p.start == 5  # inclusive start: more entries at 5 may exist
    p.add_page(_page(({"s": "a"}, [(5, "y")]), ({"s": "b"}, [(5, "z"), (7, "w")])))
    assert p.start == 7 and p.total == 4
    p.add_page(_page(({"s": "b"}, [(7, "w")])))  # fewer than limit: done
    assert p.done
    assert p.ordered() == [((("s", "a"),), [(1, "x"), (5, "y")]), ((("s", "b"),), [(5, "z"), (7, "w")])]


def test_backward_paging_moves_end_just_past_the_oldest_timestamp():
    p = Pager(start=0, end=100, limit=2, direction="backward")
    p.add_page(_page(({"s": "a"}, [(9, "c"), (8, "b2")])))  # newest first; b2 was stored after b
    assert p.end == 9  # end is exclusive: 8 is asked for again
    p.add_page(_page(({"s": "a"}, [(8, "b2"), (8, "b")])))
    assert p.end == 9 and not p.done
    p.add_page(_page(({"s": "a"}, [(8, "b2"), (8, "b")])))  # nothing new: `limit` entries share 8, step past it
    assert p.end == 8 and p.notes
    p.add_page(_page(({"s": "a"}, [(3, "a")])))
    assert p.done
    assert p.ordered() == [((("s", "a"),), [(3, "a"), (8, "b"), (8, "b2"), (9, "c")])]


def test_a_page_full_of_one_timestamp_cannot_loop_forever():
    p = Pager(start=0, end=100, limit=2)
    same = _page(({"s": "a"}, [(4, "x"), (4, "y")]))
    p.add_page(same)
    p.add_page(same)
    assert p.start == 5 and any("2 or more entries" in n for n in p.notes)


def test_paging_stops_at_max_entries():
    p = Pager(start=0, end=100, limit=2, max_entries=3)
    p.add_page(_page(({"s": "a"}, [(1, "a"), (2, "b")])))
    p.add_page(_page(({"s": "a"}, [(2, "b"), (3, "c")])))
    assert p.done and "max_entries" in p.notes[0]


# -- against the fake server -------------------------------------------------------------------------------------


def _server_streams():
    """Two nodes' kernel logs; n1 has 25 lines, 10 of them in one nanosecond (more than one small page)."""
    base = utc_ns(T0)
    n1 = [(base + i * 1_000_000_000 if i < 15 else base + 15 * 1_000_000_000, f"[Tue Mar 10 09:00:{i:02d} 2026] "
           f"line {i}") for i in range(25)]
    n2 = [(base + 7, "[Tue Mar 10 09:00:00 2026] only line")]
    old = [(utc_ns(T0 - timedelta(days=2)), "[Sun Mar  8 09:00:00 2026] before the window")]
    return [({"host": "n1", "source": "kernel"}, n1 + old), ({"host": "n2", "source": "kernel"}, n2),
            ({"host": "n1", "source": "fabricmanager"}, [])]


@pytest.fixture
def loki():
    with FakeLoki() as server:
        for labels, entries in _server_streams():
            server.add_stream(labels, entries)
        yield server


@pytest.mark.parametrize("limit", [4, 7, 11, 5000])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_every_entry_of_the_window_is_read_once_whatever_the_page_size(loki, limit, direction):
    obs, cov = _collect(loki.url, limit=limit, direction=direction, sources=("kernel",), max_entries=10_000)
    n1 = [o.text for o in obs if o.node == "n1"]
    if limit > 10:
        assert n1 == [f"line {i}" for i in range(25)]
    else:  # more entries share one nanosecond than a page holds: Loki cannot page past them
        c = next(c for c in cov if c.node == "n1")
        assert "some may not have been read" in c.notes[0]
        assert len(set(n1)) == len(n1)
    assert [o.text for o in obs if o.node == "n2"] == ["only line"]
    assert all(o.time is not None for o in obs)
    assert {(c.node, c.status) for c in cov} == {("n1", "ok"), ("n2", "ok")}
    for r in loki.requests:
        assert r["params"]["direction"] == direction and int(r["params"]["limit"]) == limit


def test_queries_carry_the_window_in_nanoseconds_and_the_tenant_header(loki):
    _collect(loki.url, tenant="team-a|team-b", sources=("kernel",))
    r = loki.requests[0]
    assert r["params"]["start"] == str(utc_ns(WINDOW[0])) and r["params"]["end"] == str(utc_ns(WINDOW[1]))
    assert r["params"]["query"] == '{host="n1", source="kernel"}'
    assert r["headers"]["X-Scope-OrgID"] == "team-a|team-b"


def test_bearer_token_and_basic_auth_come_from_owner_only_files(loki, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    _collect(loki.url, token_file=str(token), sources=("kernel",))
    assert loki.requests[-1]["headers"]["Authorization"] == "Bearer s3cret"
    _collect(loki.url, username="u", password_file=str(token), sources=("kernel",))
    assert loki.requests[-1]["headers"]["Authorization"] == "Basic dTpzM2NyZXQ="


def test_a_line_without_its_own_time_gets_the_time_loki_stored_it_with(loki):
    loki.add_stream({"host": "n2", "source": "node"}, [(utc_ns(T0) + 5_000_000_000, "no stamp in this line")])
    obs, _ = _collect(loki.url, sources=("node",))
    (o,) = [o for o in obs if o.node == "n2"]
    assert o.time == T0 + timedelta(seconds=5) and o.location.startswith('loki:{filename=') is False


def test_job_output_streams_are_parsed_as_job_output_with_the_node_from_their_label(loki):
    loki.add_stream({"job_id": "42", "source": "job", "host": "n2"},
                    [(utc_ns(T0) + 1, " 3: [rank3]:[E310 09:00:01.5 ProcessGroupNCCL.cpp:1] boom")])
    obs, cov = _collect(loki.url, sources=("job",))
    (o,) = obs
    assert (o.source, o.node, o.label, o.rank) == ("job", "n2", 3, 3)
    assert cov[0].status == "ok" and cov[0].node is None


def test_a_server_error_is_a_coverage_error_with_the_servers_words(loki):
    loki.fail_with = (500, "rpc error: code = Unavailable desc = ingester not ready\n")
    obs, cov = _collect(loki.url, sources=("kernel",))
    assert obs == []
    assert [c.status for c in cov] == ["error", "error"]
    assert "HTTP 500: rpc error" in cov[0].reason


def test_a_limit_above_the_servers_maximum_is_reported(loki):
    _, cov = _collect(loki.url, limit=6000, sources=("kernel",))
    assert cov[0].status == "error" and "max entries limit" in cov[0].reason


def test_a_bad_query_is_reported_not_raised(loki):
    s = LokiSettings(url=loki.url, sources=("kernel",), selectors={"kernel": "host=$node"})
    _, cov = collect_loki(endpoint_from(s, "loki"), s, CTX, _all, *WINDOW, time.monotonic() + 10)
    assert cov[0].status == "error" and "HTTP 400" in cov[0].reason


def test_a_hung_server_costs_one_timeout_not_one_per_query():
    with Blackhole() as hole:
        t = time.monotonic()
        obs, cov = _collect(hole.url, timeout=0.5, budget=30)
        took = time.monotonic() - t
    assert took < 2.5
    assert obs == [] and len(cov) == 5  # kernel and fabricmanager on two nodes, and the job's output
    assert all(c.status == "error" for c in cov)
    assert "answer within 0.5 s" in cov[0].reason and "not queried: Loki unreachable" in cov[-1].reason


def test_a_slow_server_is_cut_off_at_the_budget(loki):
    loki.delay = 3
    t = time.monotonic()
    _, cov = _collect(loki.url, timeout=10, budget=0.6, sources=("kernel",))
    assert time.monotonic() - t < 2
    assert all(c.status == "error" for c in cov)


def test_a_server_that_is_down_is_reported_at_once():
    with Blackhole() as hole:
        url = hole.url
    t = time.monotonic()
    _, cov = _collect(url, sources=("kernel",))
    assert time.monotonic() - t < 1
    assert "connection refused" in cov[0].reason


def test_the_fake_understands_the_documented_query_language():
    m, f = parse_logql('{host=~"n[12]", source!="job"} |= "NVRM" != "Xid 45" |~ "Xid \\\\(PCI" !~ "x"')
    assert m == [("host", "=~", "n[12]"), ("source", "!=", "job")]
    assert f == [("|=", "NVRM"), ("!=", "Xid 45"), ("|~", "Xid \\(PCI"), ("!~", "x")]


def test_line_filters_are_applied_by_the_server(loki):
    s = replace(LokiSettings(url=loki.url, sources=("kernel",)),
                selectors={"kernel": '{host=$node, source="kernel"} |= "line 1"'})
    obs, _ = collect_loki(endpoint_from(s, "loki"), s, CTX, _all, *WINDOW, time.monotonic() + 10)
    assert sorted(o.text for o in obs) == sorted(f"line {i}" for i in range(25) if str(i).startswith("1"))
