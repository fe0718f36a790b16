"""Bad input at scale: every parser takes arbitrary bytes or text and raises nothing it does not promise.

Property tests (hypothesis) over the kernel, Fabric Manager and job-output line parsers, the byte-stream parsers
(parse_node_log, parse_job_output) with the real rule pack's prefilters, the rule engine (extract), the context
parser (only InputError), the spool decoder (only SpoolCorrupt) and the JSON readers of serialize.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attribution.node import spool
from attribution.collect.fabricmanager import FabricManagerLineParser
from attribution.collect.joblog import JobLineParser, TracebackTracker, looks_labelled
from attribution.collect.joboutput import parse_job_output
from attribution.collect.kernel import KernelLineParser
from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
from attribution.correlate.rootcause import correlate
from attribution.errors import InputError, TimeError
from attribution.extract.events import extract
from attribution.model import ExecutionContext, Observation
from attribution.scope.bundle import parse_context
from attribution.serialize import (context_from_json, context_to_json, coverage_from_json, coverage_to_json,
                                   event_from_json, event_to_json)
from attribution.timeparse import resolve_zone

from tests.conftest import CASES, INCIDENTS, bundles
from tests.harness.prefilters import AllLines

pytestmark = pytest.mark.slow  # property-based runs of hundreds of examples per parser

UTC = timezone.utc
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLOWER = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Fragments of real prefixes and messages, so that generated lines get past the first character of each regex.
FRAGMENTS = [
    "[", "]", " ", "  ", ":", ": ", ",", ";", "-", "+", ".", "\t", "\r", "\n", "\0", "\x1b[31m", "\xff", "é", "😀",
    "[    5.123456] ", "[Mon Nov 30 08:00:00 2026] ", "Nov 30 08:00:00 node1 kernel: ", "6,1234,5678901,-;",
    "2026-11-30T08:00:00.123456+00:00 node1 kernel: ", "kern  :err   : 2026-11-30T08:00:00,123456+00:00 ",
    "node1: kern: warning: [2026-11-30T08:00:00.1Z]: ", "kernel: ", "-- Boot 0123abcd --", "NVRM: Xid (PCI:",
    "0000:3b:00", "): 79, ", "GPU has fallen off the bus.", "[Nov 30 2026 08:00:00] [ERROR] [tid 12] ",
    "[ERROR] [tid 1] ", "SXid (PCI:0000:05:00.0): 20034, ", "mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link DOWN",
    " 3: ", "[rank3]: ", "[PG ID 0 PG GUID 0(default_pg) Rank 12]", "node1:4242:4243 [0] ", "NCCL WARN ",
    "[2026-11-30 08:00:00] ", "[E1130 08:00:00.123 file.cc:1] ", "E1130 08:00:00.123000 42 file.py:1] ",
    "[pod/p-0/c] ", "2026-11-30T08:00:00.1Z ", "Traceback (most recent call last):", "  File \"x.py\", line 1",
    "ValueError: x", "Watchdog caught collective operation timeout", "CUDA error: an illegal memory access",
    "Out of memory: Killed process 1", "INFO: task python3:1 blocked for more than 122 seconds.", "Feb 29 ",
    "99999999999999999999", "9" * 30, "Rank ", "(((", ")))", "\\", "%s", "{}", "'", '"',
]
lines = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=25).map("".join)
raw_bytes = st.one_of(
    st.binary(max_size=4000),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)), max_size=60)
      .map(lambda parts: "".join(parts).encode("utf-8", errors="surrogateescape")),
)
zones = st.sampled_from(["UTC", "Asia/Tokyo", "Europe/Berlin", "+09:00", "-05:30", "America/St_Johns"])
times = st.datetimes(min_value=datetime(1971, 1, 2), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def contexts(draw):
    start = draw(st.none() | times)
    end = None if start is None else draw(st.none() | st.just(start + timedelta(hours=draw(st.integers(0, 48)))))
    boot = draw(st.none() | times)
    return ExecutionContext(cluster="c", job_id="1", nodes=("node1", "node2"), start=start, end=end,
                            timezone=draw(zones), boot_time={"node1": boot} if boot else {},
                            tasks_per_node=draw(st.none() | st.integers(1, 8)), state="FAILED")


# -- line parsers: never raise, always return their value --------------------------------------------------------


@FAST
@given(st.lists(lines, max_size=8), zones, st.none() | times)
def test_kernel_line_parser_takes_any_text(batch, zone, boot):
    p = KernelLineParser(zone=resolve_zone(zone), boot_time=boot)
    for line in batch:  # one parser for all: it remembers the last format seen
        r = p.parse(line)
        assert isinstance(r.text, str)


def test_an_absurd_uptime_stamp_gives_no_time_and_no_crash():
    """Found by the fuzz run in CI: a /dev/kmsg record whose microseconds field ran to 60 digits overflowed
    timedelta and ended the read of the whole log."""
    boot = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
    p = KernelLineParser(zone=resolve_zone(None), boot_time=boot)
    xid = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    fuzzed = p.parse(f"4,32,1156677497{'8' * 50}0,-;{xid}")  # the fuzzer's line: no kmsg stamp is that long
    assert fuzzed.time is None and xid in fuzzed.text
    huge = p.parse(f"6,33,{'9' * 5000},-;{xid}")  # past Python's 4300-digit int limit
    assert huge.time is None and xid in huge.text
    kmsg = p.parse(f"4,32,{'9' * 20},-;{xid}")  # a kmsg record, but three million years of uptime
    assert kmsg.time is None and kmsg.text == xid
    raw = p.parse(f"[{'9' * 400}.000000] {xid}")  # float('9' * 400) is inf
    assert raw.time is None and raw.text == xid
    good = p.parse(f"4,34,123516537819,-;{xid}")  # a sane record right after is read as before
    assert good.time == boot + timedelta(microseconds=123516537819) and good.text == xid


@FAST
@given(st.lists(lines, max_size=8), zones)
def test_fabric_manager_line_parser_takes_any_text(batch, zone):
    p = FabricManagerLineParser(zone=resolve_zone(zone))
    for line in batch:
        assert isinstance(p.parse(line).text, str)


@FAST
@given(st.lists(lines, max_size=8), zones, st.booleans())
def test_job_line_parser_takes_any_text(batch, zone, labelled):
    p = JobLineParser(zone=resolve_zone(zone), labelled=labelled)
    tracker = TracebackTracker()
    for line in batch:
        jl = p.parse(line)
        tracker.feed((jl.label, jl.rank, jl.pod), jl)
    looks_labelled(batch)


# -- byte streams: never raise, count every byte ----------------------------------------------------------------


@SLOWER
@given(raw_bytes, contexts(), st.sampled_from(["kernel", "fabricmanager", "node"]), st.booleans())
def test_parse_node_log_takes_any_bytes(ruleset, data, ctx, source, every_line):
    prefilter = AllLines() if every_line else ruleset.prefilter(source)
    obs, stats = parse_node_log(io.BytesIO(data), NodeLogSpec(source, "node1", "x.log"), ctx, prefilter)
    assert stats.bytes == len(data)
    assert all(o.node == "node1" and isinstance(o.text, str) for o in obs)
    extract(ruleset, ctx, obs)


@SLOWER
@given(raw_bytes, contexts(), st.booleans())
def test_parse_job_output_takes_any_bytes(ruleset, data, ctx, every_line):
    prefilter = AllLines() if every_line else ruleset.prefilter("job")
    obs, stats = parse_job_output(io.BytesIO(data), "job/x.out", ctx, prefilter)
    assert stats.bytes == len(data)
    events = extract(ruleset, ctx, obs)
    correlate(ruleset, ctx, events)


@FAST
@given(lines, st.sampled_from(["kernel", "fabricmanager", "node", "job", "scheduler"]), contexts(),
       st.none() | st.text(max_size=20), st.none() | st.integers(-5, 10**6))
def test_the_rule_engine_takes_any_observation(ruleset, text, source, ctx, host, rank):
    obs = Observation(source=source, node=None, location="x:1", text=text, line=text, host=host, rank=rank)
    events = extract(ruleset, ctx, [obs])
    correlate(ruleset, ctx, events)


# -- context.yaml: only InputError -------------------------------------------------------------------------------

FIELDS = ["scheduler", "cluster", "job_id", "user", "partition", "state", "exit_code", "failed_node", "nodes",
          "tasks_per_node", "srun_tasks_per_node", "start", "end", "timezone", "boot_time", "gpus_per_node"]
SCALARS = st.one_of(
    st.from_regex(r"\A-?\d{1,6}-\d{1,2}-\d{1,2}([T ]\d{1,2}:\d{1,2}:\d{1,2}(\.\d{1,9})?(Z|[+-]\d{1,2}(:\d\d)?)?)?\Z"),
    st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["1e300", "-1e300", ".inf", "-.inf", ".nan", "null", "~", "true", "0", "-1", "''", "[]", "{}",
                     "n[1-3]", "n[1-99999999]", "'n[3-1]'", "[a, b]", "{a: 1}", "!!binary aGk=", "&a [*a]",
                     "!!python/object/apply:os.system ['true']", "'+99:00'", "Asia/Tokyo", "'\\0'", "\"\\x00\""]),
    st.text(max_size=15).map(json.dumps),
)


@st.composite
def context_texts(draw):
    keys = draw(st.lists(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8).map(json.dumps),
                                   st.integers().map(str)), max_size=8, unique=True))
    body = "".join(f"{k}: {draw(SCALARS)}\n" for k in keys)
    if draw(st.booleans()):
        body = "cluster: c\njob_id: '1'\nnodes: n1\n" + body
    return body


@FAST
@given(st.one_of(context_texts(), st.text(max_size=300)))
@example("cluster: c\njob_id: 1\nnodes: n[1-99999999]\n")
@example("!!python/object/apply:os.system ['echo owned > /tmp/attribution-owned']\n")
def test_parse_context_raises_only_input_error(text):
    try:
        parse_context(text)
    except InputError:
        pass  # anything else propagates and fails the test
    assert not Path("/tmp/attribution-owned").exists()


# Found by the property above (issue #9): values that once escaped as ValueError/TypeError/OverflowError.
CONTEXT_BUGS = [
    ("cluster: c\njob_id: 1\nnodes: n1\nstart: 2026-13-45\n", "month must be in 1..12"),
    ("cluster: c\njob_id: 1\nnodes: n1\nstart: 99999999999999\n", "out of range"),
    ("cluster: c\njob_id: 1\nnodes: n1\nstart: .inf\n", "out of range"),
    ("cluster: c\njob_id: 1\nnodes: n1\ntimezone: '+99:00'\n", "offset must be a timedelta"),
    ("cluster: c\njob_id: 1\nnodes: n1\n1: x\nfoo: y\n", "not supported between instances"),
]


@pytest.mark.parametrize("text,message", CONTEXT_BUGS, ids=[m for _, m in CONTEXT_BUGS])
def test_malformed_context_values_are_input_errors(text, message):
    with pytest.raises(InputError) as err:
        parse_context(text)
    assert str(err.value).startswith("context.yaml: ")


# -- the spool decoder: only SpoolCorrupt -----------------------------------------------------------------------


def _framed(body: bytes) -> bytes:
    head = spool.MAGIC + b" " + hashlib.sha256(body).hexdigest().encode() + b" " + str(len(body)).encode()
    return head + b"\n" + body


@FAST
@given(st.one_of(
    st.binary(max_size=2000),
    st.binary(max_size=2000).map(lambda b: spool.MAGIC + b" " + b),
    st.binary(max_size=2000).map(_framed),
    st.text(max_size=200).map(lambda s: _framed(s.encode("utf-8", errors="surrogateescape"))),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3))
      .map(lambda v: _framed(json.dumps(v).encode())),
))
@example(_framed(b"[" * 100_000))  # nesting deeper than the JSON decoder's recursion limit
@example(spool.MAGIC + b" ab " + b"9" * 5000 + b"\nx")  # a length longer than int() accepts
def test_the_spool_decoder_raises_only_spool_corrupt(data):
    try:
        spool.decode(data)
    except spool.SpoolCorrupt:
        pass


# -- serialize: JSON objects of any shape ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=12),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
EXPECTED_JSON_ERRORS = (InputError, TimeError, ValueError, TypeError, KeyError)


def _objects(keys):
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), json_values, max_size=len(keys) + 2)


EVENT_KEYS = ["kind", "role", "rule", "source", "location", "line", "message", "node", "gpu", "code", "rank",
              "outcome", "action", "severity", "time", "fields"]


@FAST
@given(_objects(EVENT_KEYS))
def test_event_from_json_takes_any_object(d):
    try:
        event_from_json(d)
    except EXPECTED_JSON_ERRORS:
        pass


@FAST
@given(_objects(["source", "node", "status", "lines", "reason", "file", "notes"]))
def test_coverage_from_json_takes_any_object(d):
    try:
        coverage_from_json(d)
    except EXPECTED_JSON_ERRORS:
        pass


@FAST
@given(_objects(FIELDS))
def test_context_from_json_takes_any_object(d):
    try:
        context_from_json(d)
    except InputError:
        pass  # anything else propagates and fails the test


def test_serialize_round_trips_every_example_incident(ruleset):
    """What the spool and the store's context column write reads back to the same values."""
    from attribution.pipeline.diagnose import diagnose_bundle

    for b in bundles(INCIDENTS) + bundles(CASES):
        d = diagnose_bundle(ruleset, b)
        assert context_from_json(json.loads(json.dumps(context_to_json(d.context)))) == d.context
        for e in d.events:
            assert event_to_json(event_from_json(json.loads(json.dumps(event_to_json(e))))) == event_to_json(e)
        for c in d.coverage:
            assert coverage_from_json(json.loads(json.dumps(coverage_to_json(c)))) == c
