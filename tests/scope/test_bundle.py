"""scope: context.yaml to an immutable execution context."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from attribution.errors import InputError
from attribution.scope.bundle import expand_nodes, load_context, normalize_state, parse_context

UTC = timezone.utc


@pytest.mark.parametrize("expr,nodes", [
    ("hx-gpu[017-020]", ["hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020"]),
    ("qk[0100-0103]", ["qk0100", "qk0101", "qk0102", "qk0103"]),
    ("rack[0-1]_blade[0-1]", ["rack0_blade0", "rack0_blade1", "rack1_blade0", "rack1_blade1"]),
    ("linux[0-2,10],login1", ["linux0", "linux1", "linux2", "linux10", "login1"]),
    ("cpn-k07-05-[01-02]", ["cpn-k07-05-01", "cpn-k07-05-02"]),
    (["a1", "b[1-2]"], ["a1", "b1", "b2"]),
])
def test_hostlists(expr, nodes):
    assert list(expand_nodes(expr)) == nodes


def test_bad_hostlist_names_the_problem():
    with pytest.raises(InputError, match="bad hostlist"):
        expand_nodes("gpu[1-")


def test_full_context_and_rank_mapping():
    ctx = parse_context("""
scheduler: slurm
cluster: prod-a
job_id: 4242
user: alice
state: CANCELLED by 1234
exit_code: "0:15"
nodes: "gpu[001-004]"
tasks_per_node: 8
srun_tasks_per_node: 1
start: 2026-10-01T12:00:00Z
end: 2026-10-01T15:05:10+02:00
timezone: Asia/Tokyo
boot_time:
  gpu001: 2026-09-30T08:00:00
""")
    assert ctx.job_id == "4242" and ctx.state == "CANCELLED"
    assert ctx.end == datetime(2026, 10, 1, 13, 5, 10, tzinfo=UTC)
    # a zone-less boot_time is read in the context's zone (Tokyo, +09:00)
    assert ctx.boot_time["gpu001"] == datetime(2026, 9, 29, 23, 0, tzinfo=UTC)
    assert ctx.node_of_rank(0) == "gpu001" and ctx.node_of_rank(31) == "gpu004" and ctx.node_of_rank(32) is None
    assert ctx.node_of_task(2) == "gpu003"
    assert ctx.resolve_host("gpu003.cluster.local") == "gpu003"
    assert ctx.resolve_host("login1") is None
    with pytest.raises(TypeError):
        ctx.boot_time["gpu002"] = ctx.start  # frozen


def test_offset_timezone():
    ctx = parse_context("cluster: c\njob_id: '1'\nnodes: [n1]\nstart: '2026-01-01 09:00:00'\ntimezone: '+09:00'\n")
    assert ctx.start == datetime(2026, 1, 1, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize("text,message", [
    ("cluster: c\nnodes: [a]\n", "missing required field 'job_id'"),
    ("cluster: c\njob_id: 1\nnodes: [a]\nbogus: 1\n", "unknown field(s): bogus"),
    ("cluster: c\njob_id: 1\nnodes: [a]\nstart: yesterday\n", "start: 'yesterday' is not an ISO 8601 time"),
    ("cluster: c\njob_id: 1\nnodes: [a]\ntimezone: Mars/Olympus\n", "unknown time zone"),
    ("cluster: c\njob_id: 1\nnodes: [a]\ntasks_per_node: -2\n", "must be positive"),
    ("cluster: c\njob_id: 1\nnodes: [a]\nstart: 2026-01-02T00:00:00Z\nend: 2026-01-01T00:00:00Z\n", "before start"),
    ("- just\n- a list\n", "expected a mapping"),
    ("cluster: [unclosed\n", "malformed YAML"),
    ("cluster: c\njob_id: 1\nnodes: [a]\njob_name: " + "x" * 256 + "\n", "job_name: a name of 256 characters"),
    ('cluster: c\njob_id: 1\nnodes: [a]\njob_name: "a\\0b"\n', "job_name: a NUL character"),
])
def test_bad_context_names_file_and_problem(text, message):
    with pytest.raises(InputError) as exc:
        parse_context(text, "b/context.yaml")
    assert str(exc.value).startswith("b/context.yaml") and message in str(exc.value)


def test_missing_and_binary_context_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_context(tmp_path / "context.yaml")
    (tmp_path / "context.yaml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not UTF-8"):
        load_context(tmp_path / "context.yaml")


@pytest.mark.parametrize("raw,state", [("TIMEOUT", "TIMEOUT"), ("CANCELLED by 132794", "CANCELLED"),
                                       ("cancelled+", "CANCELLED"), (None, "UNKNOWN"), ("", "UNKNOWN")])
def test_state_word(raw, state):
    assert normalize_state(raw) == state


def test_a_job_name_is_any_text_and_goes_through_the_stored_form():
    from attribution.serialize import context_from_json, context_to_json

    ctx = parse_context("cluster: c\njob_id: '1'\nnodes: [n1]\njob_name: 'llama 70b: run #3'\n")
    assert ctx.job_name == "llama 70b: run #3"
    assert context_from_json(context_to_json(ctx)) == ctx
    assert parse_context("cluster: c\njob_id: '1'\nnodes: [n1]\njob_name: ''\n").job_name is None
