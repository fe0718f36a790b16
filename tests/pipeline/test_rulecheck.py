"""Every rule's own examples: real lines it must match (with the fields it must produce), near-misses it must not.

One parametrized test runs them all, through the same collector parsing and prefilter as real logs.
"""

from __future__ import annotations

import pytest

from attribution.pipeline.rulecheck import _value_matches, check_ignore, check_pack, events_for_line
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT

_RS = load_rules(ROOT / "rules")
MATCH = [(r.id, i, ex) for r in _RS.rules for i, ex in enumerate(r.examples)]
NO_MATCH = [(r.id, i, r.source, line) for r in _RS.rules for i, line in enumerate(r.no_match)]
IGNORES = [ig.id for ig in _RS.ignores]


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


@pytest.mark.parametrize("ignore_id", IGNORES)
def test_an_ignore_entry_matches_its_error_looking_examples_no_rule_reads_and_none_of_its_near_misses(ruleset,
                                                                                                     ignore_id):
    (ig,) = [i for i in ruleset.ignores if i.id == ignore_id]
    assert ig.examples and ig.no_match
    assert check_ignore(ruleset, ig) == []


HOOKS = ROOT / "hooks" / "suspicious.patterns"


def _pack_with_ignore(tmp_path, entry: dict):
    import shutil

    import yaml

    from tests.conftest import ROOT

    pack = tmp_path / "pack"
    shutil.copytree(ROOT / "rules", pack)
    (pack / "extra.yaml").write_text(yaml.safe_dump({"type": "rules", "rules": [{
        "id": "job.extra_placeholder", "source": "job", "pattern": "placeholder fault 42", "kind": "nccl_error",
        "examples": {"match": [{"line": "placeholder fault 42", "ref": "RECON test"}],
                     "no_match": ["placeholder ok"]}}], "ignore": [entry]}, sort_keys=False, width=1000))
    return pack


def _entry(match: str, no_match: str, pattern: str = r"^Hint: rerun") -> dict:
    return {"id": "job.ignore_test_hint", "source": "job", "description": "a test hint that says nothing",
            "pattern": pattern, "examples": {"match": [{"line": match, "ref": "RECON test"}],
                                             "no_match": [no_match]}}


def test_rules_check_refuses_an_ignore_entry_whose_example_is_not_error_looking(tmp_path):
    problems, _ = check_pack(_pack_with_ignore(tmp_path, _entry("Hint: rerun the job", "step 3")), HOOKS)
    assert any("not error-looking" in p.message for p in problems), problems


def test_rules_check_refuses_an_ignore_entry_that_hides_a_line_a_rule_reads(tmp_path):
    entry = _entry("placeholder fault 42: error", "step 3 error", pattern="^placeholder fault")
    problems, _ = check_pack(_pack_with_ignore(tmp_path, entry), HOOKS)
    assert any("job.extra_placeholder matches its example" in p.message for p in problems), problems


def test_rules_check_refuses_an_ignore_entry_matching_its_near_miss_or_missing_its_example(tmp_path):
    entry = _entry("Hint: rerun after the error", "Hint: rerun failed", pattern="^Hint: rerun")
    problems, _ = check_pack(_pack_with_ignore(tmp_path, entry), HOOKS)
    assert [p.message for p in problems if "near-miss matches" in p.message], problems
    entry = _entry("Hint: rerun after the error", "step 3", pattern="^Hint: do not")
    problems, _ = check_pack(_pack_with_ignore(tmp_path / "b", entry), HOOKS)
    assert [p.message for p in problems if "example does not match" in p.message], problems


def test_a_good_ignore_entry_passes_rules_check(tmp_path):
    problems, summary = check_pack(_pack_with_ignore(tmp_path, _entry("Hint: rerun after the error", "step 3")),
                                   HOOKS)
    assert problems == [] and "ignored line patterns" in summary
