"""The model: frozen values, where a rank, a task or a host name runs, and the events' total order."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from attribution.frozen import replace
from attribution.model import Coverage, Event, ExecutionContext

UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("gpu01", "gpu02", "gpu03"), tasks_per_node=8,
                       srun_tasks_per_node=2)


def test_values_are_frozen_and_their_mappings_read_only():
    ev = Event(kind="k", role="cause", rule="r.k", source="kernel", location="f:1", line="l", message="m",
               fields={"a": "1"})
    with pytest.raises(AttributeError):
        ev.kind = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.fields["a"] = "2"  # type: ignore[index]
    ctx = ExecutionContext(cluster="c", job_id="1", nodes=("n",), boot_time={"n": datetime(2026, 1, 1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        ctx.boot_time["n"] = None  # type: ignore[index]


@pytest.mark.parametrize("rank, node", [(0, "gpu01"), (7, "gpu01"), (8, "gpu02"), (23, "gpu03"), (24, None),
                                        (-1, None), (None, None)])
def test_a_rank_runs_on_the_node_of_its_block(rank, node):
    assert CTX.node_of_rank(rank) == node


@pytest.mark.parametrize("task, node", [(0, "gpu01"), (1, "gpu01"), (2, "gpu02"), (5, "gpu03"), (6, None)])
def test_an_srun_task_maps_through_srun_tasks_per_node(task, node):
    assert CTX.node_of_task(task) == node


def test_an_srun_task_falls_back_to_tasks_per_node():
    ctx = replace(CTX, srun_tasks_per_node=None)
    assert ctx.node_of_task(9) == "gpu02"
    assert replace(CTX, tasks_per_node=None, srun_tasks_per_node=None).node_of_rank(3) is None


@pytest.mark.parametrize("host, node", [("gpu02", "gpu02"), ("gpu02.cluster.example", "gpu02"),
                                        ("gpu09.cluster.example", None), ("", None), (None, None)])
def test_a_host_name_resolves_to_one_of_the_jobs_nodes(host, node):
    assert CTX.resolve_host(host) == node


def _ev(**kw) -> Event:
    base = dict(kind="k", role="cause", rule="r.k", source="kernel", location="f:1", line="l", message="m")
    return Event(**{**base, **kw})


def test_events_sort_by_time_then_node_and_untimed_ones_last():
    t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    late = _ev(time=t.replace(minute=5), node="a")
    early_b = _ev(time=t, node="b")
    early_a = _ev(time=t, node="a")
    untimed = _ev(node="a")
    assert sorted([untimed, late, early_b, early_a], key=Event.sort_key) == [early_a, early_b, late, untimed]


def test_coverage_as_dict_leaves_out_what_is_unset():
    assert Coverage("kernel", "n1", "ok", lines=3).as_dict() == {"source": "kernel", "node": "n1", "status": "ok",
                                                                 "lines": 3}
    assert Coverage("job", None, "error", reason="cannot read", file="/x", notes=("a",)).as_dict() == {
        "source": "job", "node": None, "status": "error", "lines": 0, "file": "/x", "reason": "cannot read",
        "notes": ["a"]}


def test_the_verdict_outcomes_are_the_schemas():
    """model.OUTCOMES is the rule pack's vocabulary (rules/schema/defs.schema.json `outcome`), in its order."""
    import json

    from attribution.model import OUTCOMES
    from attribution.resources import rules_dir

    defs = json.loads((rules_dir() / "schema" / "defs.schema.json").read_text())
    assert OUTCOMES == tuple(defs["$defs"]["outcome"]["enum"])
