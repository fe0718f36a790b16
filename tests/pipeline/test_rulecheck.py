"""Every rule's own examples: real lines it must match (with the fields it must produce), near-misses it must not.

One parametrized test runs them all, through the same collector parsing and prefilter as real logs.
"""

from __future__ import annotations

import pytest

from attribution.pipeline.rulecheck import _value_matches, events_for_line
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT

_RS = load_rules(ROOT / "rules")
MATCH = [(r.id, i, ex) for r in _RS.rules for i, ex in enumerate(r.examples)]
NO_MATCH = [(r.id, i, r.source, line) for r in _RS.rules for i, line in enumerate(r.no_match)]


@pytest.mark.parametrize("rule_id,i,example", MATCH, ids=[f"{r}#{i}" for r, i, _ in MATCH])
def test_rule_matches_its_example(ruleset, rule_id, i, example):
    evs = [e for e in events_for_line(ruleset, example.source, example.line) if e.rule == rule_id]
    assert evs, f"{rule_id} does not match {example.line!r}"
    assert any(all(_value_matches(e, k, v) for k, v in example.expect.items()) for e in evs), \
        (dict(example.expect), [(e.kind, e.code, e.gpu, e.rank, dict(e.fields)) for e in evs])


@pytest.mark.parametrize("rule_id,i,source,line", NO_MATCH, ids=[f"{r}#{i}" for r, i, _, _ in NO_MATCH])
def test_rule_ignores_its_near_miss(ruleset, rule_id, i, source, line):
    assert [e for e in events_for_line(ruleset, source, line) if e.rule == rule_id] == []


def test_every_rule_has_a_real_example_and_a_near_miss():
    for r in _RS.rules:
        assert r.examples, r.id
        assert r.no_match, f"{r.id} has no near-miss example"


def test_every_event_kind_of_the_spec_is_produced_by_some_rule_or_catalog():
    spec_kinds = {
        "gpu_fallen_off_bus", "gpu_ecc_dbe", "gpu_ecc_contained", "gpu_ecc_uncontained", "gpu_row_remap_failure",
        "gpu_row_remap_pending", "gpu_firmware_error", "gpu_app_exception", "xid_45_cleanup", "nvlink_error",
        "nvlink_nonfatal", "nvswitch_fatal", "nvswitch_nonfatal", "gpu_recovery_action", "ib_link_down",
        "nccl_ib_completion_error", "nccl_watchdog_timeout", "nccl_error", "cuda_ecc_error", "cuda_illegal_address",
        "cuda_error", "cuda_oom", "python_exception", "task_exit", "hung_task", "oom_kill", "filesystem_error",
        "node_fail", "time_limit"}
    produced = {r.kind for r in _RS.rules if r.kind}
    for cat in _RS.catalogs.values():
        for e in list(cat.entries.values()) + ([cat.default] if cat.default else []):
            produced.add(e.kind)
            produced.update(v.kind for v in e.variants)
    assert spec_kinds <= produced, spec_kinds - produced
