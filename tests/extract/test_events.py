"""extract: observations to normalized events by the shipped rules: the node a job line belongs to, GPU ids in
every printed form, catalog lookups, rules that give way to more specific ones, and an order-free result."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from attribution.extract.events import extract, normalize_gpu, resolve_node
from attribution.model import ExecutionContext, Observation

UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="7", nodes=("gpu01", "gpu02"), tasks_per_node=8, timezone="Asia/Tokyo")
WATCHDOG = ("[E ProcessGroupNCCL.cpp:737] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL("
            "SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.")


def _obs(text: str, source: str = "job", node: str | None = None, **kw) -> Observation:
    return Observation(source=source, node=node, location=kw.pop("location", "out:1"), text=text, line=text, **kw)


@pytest.mark.parametrize("printed, want", [("PCI:0000:9b:00", "0000:9b:00"), ("00000000:86:00.0", "0000:86:00"),
                                           ("3b:00.0", "0000:3b:00"), ("0009:01:00", "0009:01:00"), ("", None),
                                           (None, None), ("GPU-1234", "gpu-1234")])
def test_gpu_ids_in_every_printed_form_become_one(printed, want):
    assert normalize_gpu(printed) == want


def test_a_job_line_belongs_to_the_node_of_its_host_then_rank_then_task():
    assert resolve_node(CTX, _obs("x", host="gpu02.example"), {}) == "gpu02"
    assert resolve_node(CTX, _obs("x"), {"rank": "9"}) == "gpu02"
    assert resolve_node(CTX, _obs("x", rank=3), {}) == "gpu01"
    assert resolve_node(CTX, _obs("x", label=15), {}) == "gpu02"
    assert resolve_node(CTX, _obs("x"), {}) is None
    # a node log's line belongs to its node, whatever it names
    assert resolve_node(CTX, _obs("x", source="kernel", node="gpu01", host="gpu02"), {"rank": "9"}) == "gpu01"


def test_a_rule_gives_kind_role_rank_node_and_fields(ruleset):
    [ev] = extract(ruleset, CTX, [_obs(WATCHDOG)])
    assert (ev.kind, ev.role, ev.rule, ev.rank, ev.node) == ("nccl_watchdog_timeout", "symptom",
                                                            "job.nccl_watchdog_timeout", 9, "gpu02")
    assert dict(ev.fields) == {"seq": "469508", "op": "ALLREDUCE"}


def test_a_catalog_rule_takes_kind_action_and_mnemonic_from_the_code(ruleset):
    line = "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"
    [ev] = extract(ruleset, CTX, [_obs(line, source="kernel", node="gpu01", location="kern:3")])
    assert (ev.kind, ev.code, ev.gpu, ev.action, ev.node) == ("gpu_ecc_dbe", 48, "0000:07:00", "reset_gpu", "gpu01")
    assert ev.fields["mnemonic"]
    unknown = "NVRM: Xid (PCI:0000:07:00): 999, something new"
    [ev] = extract(ruleset, CTX, [_obs(unknown, source="kernel", node="gpu01")])
    assert (ev.kind, ev.code) == ("gpu_xid_error", 999)  # the catalog's default for a code it does not list


def test_a_general_rule_gives_way_to_a_more_specific_one_on_the_same_line(ruleset):
    evs = extract(ruleset, CTX, [_obs("RuntimeError: CUDA error: uncorrectable ECC error encountered")])
    assert "cuda_ecc_error" in {e.kind for e in evs} and "cuda_error" not in {e.kind for e in evs}
    evs = extract(ruleset, CTX, [_obs("RuntimeError: CUDA error: unknown error")])
    assert "cuda_error" in {e.kind for e in evs}


def test_one_line_that_names_nccl_misuse_gives_the_cause_beside_the_nccl_symptom(ruleset):
    """Two rules read the same line (no first-match-wins): rules/nccl-usage.yaml makes the misuse an application
    cause, rules/nccl.yaml the same line an nccl_error symptom; the generic Python exception steps aside."""
    line = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691,"
            " invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3")
    by_kind = {e.kind: e for e in extract(ruleset, CTX, [_obs(line)])}
    assert by_kind["nccl_invalid_usage"].role == "cause" and by_kind["nccl_invalid_usage"].outcome == "application"
    assert by_kind["nccl_error"].role == "symptom"
    assert "python_exception" not in by_kind
    # the same wrapper with a peer's failure in it names no misuse: only the symptom
    other = line.replace("invalid usage (run with NCCL_DEBUG=WARN", "unhandled system error (run with NCCL_DEBUG=INFO")
    assert {e.kind for e in extract(ruleset, CTX, [_obs(other)])} == {"nccl_error"}


def test_the_observed_time_is_the_events_time_and_without_one_there_is_none(ruleset):
    t = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)
    [ev] = extract(ruleset, CTX, [_obs(WATCHDOG, time=t)])
    assert ev.time == t
    [ev] = extract(ruleset, CTX, [_obs(WATCHDOG)])
    assert ev.time is None


def test_a_clean_line_and_a_near_miss_make_no_event(ruleset):
    assert extract(ruleset, CTX, [_obs("epoch 3 step 1200 loss 1.92"),
                                  _obs("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad", source="kernel", node="gpu01")]) == []


def test_the_result_does_not_depend_on_the_order_of_the_observations(ruleset):
    obs = [_obs(WATCHDOG, location=f"out:{i}", rank=i) for i in range(6)]
    obs += [_obs("NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus.", source="kernel", node="gpu02",
                 location="kern:1")]
    want = extract(ruleset, CTX, obs)
    shuffled = obs[:]
    random.Random(5).shuffle(shuffled)
    assert extract(ruleset, CTX, shuffled) == want
