"""The indexed "explains" relation answers exactly what testing every pair answers, with far fewer tests."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.correlate import explains as ex
from attribution.correlate.rootcause import correlate
from attribution.correlate.explains import Placed, Relation

from tests.correlate.test_rootcause import CTX, ev

KINDS = ["gpu_fallen_off_bus", "gpu_ecc_dbe", "gpu_ecc_contained", "nvlink_error", "nvswitch_fatal",
         "gpu_app_exception", "xid_45_cleanup", "cuda_illegal_address", "cuda_error", "nccl_error",
         "nccl_watchdog_timeout", "task_exit", "python_exception", "oom_kill", "ib_link_down", "filesystem_error"]
NODES = ["a", "b", None]
GPUS = ["0000:3a:00", "0000:47:00", None]


@st.composite
def event_sets(draw):
    n = draw(st.integers(0, 40))
    out = []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        seconds = draw(st.one_of(st.none(), st.floats(-5, 400, allow_nan=False).map(lambda x: round(x, 1))))
        fields = {"caused_by": str(draw(st.sampled_from([48, 79, 74])))} if draw(st.booleans()) else {}
        out.append((kind, draw(st.sampled_from(NODES)), seconds, draw(st.sampled_from(GPUS)),
                    draw(st.sampled_from([None, 13, 48, 74, 79])), fields, i))
    return out


def _placed(ruleset, spec):
    evs = []
    for kind, node, seconds, gpu, code, fields, i in spec:
        e = ev(ruleset, kind, node or "a", seconds, gpu=gpu, code=code, **fields)
        if node is None:
            from attribution.frozen import replace

            e = replace(e, node=None, location=f"job:{i}")
        evs.append(e)
    end_t = CTX.end.timestamp()
    evs.sort(key=lambda e: e.sort_key())
    return [Placed(e, e.time.timestamp() if e.time else end_t, i) for i, e in enumerate(evs)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=event_sets())
@pytest.mark.slow
def test_the_index_agrees_with_every_pair(ruleset, spec):
    placed = _placed(ruleset, spec)
    causes = [p for p in placed if p.ev.role == "cause"]
    rel = Relation(ruleset.graph, causes, placed)
    for b in placed:
        brute = sorted((a for a in causes if rel.explains(a, b)), key=lambda a: (a.t, a.idx))
        assert [a.idx for a in rel.explainers(b)] == [a.idx for a in brute]
    for a in causes:
        assert rel.count(a) == sum(1 for b in placed if rel.explains(a, b))


def test_untimed_events_at_an_unknown_end_are_explained_as_the_definition_says(ruleset):
    placed = [Placed(ev(ruleset, "gpu_fallen_off_bus", "a", None, gpu="0000:3a:00", code=79), math.inf, 0),
              Placed(ev(ruleset, "nccl_error", "b", None), math.inf, 1),
              Placed(ev(ruleset, "nccl_error", "b", 10), 10.0, 2)]
    rel = Relation(ruleset.graph, placed[:1], placed)
    assert [a.idx for a in rel.explainers(placed[1])] == [0]
    assert list(rel.explainers(placed[2])) == []
    assert rel.count(placed[0]) == 1


def _storm(ruleset, n):
    """One GPU falls off the bus; every rank then prints Xid 13s and NCCL errors: n of each."""
    evs = [ev(ruleset, "gpu_fallen_off_bus", "a", 0, gpu="0000:3a:00", code=79)]
    for i in range(n):
        node = "abc"[i % 3]
        evs.append(ev(ruleset, "gpu_app_exception", node, 1 + i / 100, gpu="0000:3a:00", code=13))
        evs.append(ev(ruleset, "nccl_error", node, 2 + i / 100))
    return evs


def _pair_tests(ruleset, monkeypatch, n) -> int:
    calls = 0
    real = ex.edge_explains

    def counting(*args):
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(ex, "edge_explains", counting)
    v = correlate(ruleset, CTX, _storm(ruleset, n))
    assert v.outcome == "gpu_hardware" and v.root_cause.code == 79
    return calls


def test_a_storm_costs_pair_tests_linear_in_its_length(ruleset, monkeypatch):
    """Counted, not timed: 4x the lines may cost about 4x the pair tests, where every pair would be 16x."""
    small, large = _pair_tests(ruleset, monkeypatch, 300), _pair_tests(ruleset, monkeypatch, 1200)
    print(f"\npair tests: {small} for 300 lines, {large} for 1200")
    assert large < 6 * small, (small, large)
