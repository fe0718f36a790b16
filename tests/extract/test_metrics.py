"""metricrules.py: metric series to events by the rules of rules/metrics.yaml (every example of every rule runs
here), the two triggers, and the Xid catalog shared with the kernel's Xid lines."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest

from attribution.errors import RulePackError
from attribution.extract.metrics import changes, check_examples, evaluate, example_series, metric_rules
from attribution.samples import MetricSeries
from attribution.model import ExecutionContext
from attribution.pipeline.rulecheck import events_for_line, example_context
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT

UTC = timezone.utc
T = 1_773_133_200.0  # 2026-03-10T09:00:00Z
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("gpu001", "gpu002"))


def _examples():
    rs = load_rules(ROOT / "rules")
    return [pytest.param(rule, ex, id=f"{rule.id}-{i + 1}") for rule in metric_rules(rs)
            for i, ex in enumerate(rule.examples)]


@pytest.mark.parametrize("rule,example", _examples())
def test_every_metric_rule_example(ruleset, rule, example):
    ctx = example_context()
    got = evaluate(ruleset, ctx, [rule], [example_series(rule, example, ctx.nodes[0])])
    assert len(got) == len(example["expect"]), [(e.kind, e.code, e.time) for e in got]


def test_the_shipped_metric_rules_pass_their_own_check(ruleset):
    assert check_examples(ruleset, example_context()) == []


def test_the_pack_has_the_dcgm_rules(ruleset):
    metrics = {r.metric: r for r in metric_rules(ruleset)}
    assert metrics["DCGM_FI_DEV_XID_ERRORS"].trigger == "change_to_nonzero"
    assert metrics["DCGM_FI_DEV_XID_ERRORS"].catalog == "xid"
    for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"):
        assert name in metrics
    assert dict(metrics["DCGM_FI_DEV_XID_ERRORS"].labels) == {"node": "Hostname", "gpu": "pci_bus_id",
                                                              "gpu_index": "gpu", "uuid": "UUID"}


def test_a_stuck_gauge_never_fires_again():
    values = [0, 79] + [79] * 500
    fired = changes("change_to_nonzero", [(T + 15 * i, v) for i, v in enumerate(values)])
    assert [(c.index, c.previous, c.value) for c in fired] == [(1, 0, 79)]


def test_the_first_sample_is_the_baseline_even_when_it_is_an_xid():
    assert changes("change_to_nonzero", [(T, 79.0), (T + 15, 79.0)]) == []


def test_a_counter_reset_is_not_a_decrease():
    fired = changes("increase", [(T, 5.0), (T + 15, 0.0), (T + 30, 2.0), (T + 45, 2.0), (T + 60, 4.0)])
    assert [(c.index, c.increase) for c in fired] == [(2, 2.0), (4, 2.0)]
    assert changes("increase", [(T, 0.0), (T + 15, 1.0)], min_increase=2) == []


@pytest.mark.parametrize("code", [13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 94, 95, 119, 120, 136, 154])
def test_a_dcgm_xid_has_the_kind_of_the_kernel_xid_line(ruleset, code):
    kernel = [e for e in events_for_line(ruleset, "kernel", f"[100.000000] NVRM: Xid (PCI:0000:3b:00): {code}, "
                                                            f"pid=1, name=python3, details")
              if e.rule == "kernel.xid"]
    rule = next(r for r in metric_rules(ruleset) if r.metric == "DCGM_FI_DEV_XID_ERRORS")
    s = MetricSeries(rule.metric, {"Hostname": "gpu001", "pci_bus_id": "00000000:3B:00.0", "gpu": "0"},
                     ((T, 0.0), (T + 15, float(code))))
    (metric,) = evaluate(ruleset, CTX, [rule], [s])
    assert (metric.kind, metric.role, metric.action, metric.code) == (kernel[0].kind, kernel[0].role,
                                                                      kernel[0].action, kernel[0].code)
    assert metric.gpu == kernel[0].gpu == "0000:3b:00"


def test_an_event_carries_node_gpu_time_and_the_change(ruleset):
    rule = next(r for r in metric_rules(ruleset) if r.metric == "DCGM_FI_DEV_XID_ERRORS")
    s = MetricSeries(rule.metric, {"Hostname": "gpu002.cluster.local", "pci_bus_id": "00000000:9D:00.0", "gpu": "4",
                                   "UUID": "GPU-abc", "job": "dcgm"}, ((T, 0.0), (T + 15, 79.0), (T + 30, 79.0)))
    (e,) = evaluate(ruleset, CTX, [rule], [s])
    assert (e.node, e.gpu, e.code, e.source, e.rule) == ("gpu002", "0000:9d:00", 79, "metrics", "metrics.dcgm_xid")
    assert e.time == datetime(2026, 3, 10, 9, 0, 15, tzinfo=UTC)
    assert e.fields["gpu_index"] == "4" and e.fields["gpu_uuid"] == "GPU-abc" and e.fields["previous"] == "0"
    assert "changed from 0 to 79" in e.line and "job=" not in e.location


def test_series_of_other_nodes_are_ignored(ruleset):
    rules = metric_rules(ruleset)
    s = MetricSeries("DCGM_FI_DEV_XID_ERRORS", {"Hostname": "elsewhere"}, ((T, 0.0), (T + 15, 79.0)))
    assert evaluate(ruleset, CTX, rules, [s]) == []


def test_configured_label_names_override_the_packs(ruleset):
    rules = metric_rules(ruleset, {"node": "node", "gpu": "bus"})
    s = MetricSeries("DCGM_FI_DEV_XID_ERRORS", {"node": "gpu001", "bus": "0000:3b:00.0"}, ((T, 0.0), (T + 15, 48.0)))
    (e,) = evaluate(ruleset, CTX, rules, [s])
    assert (e.node, e.gpu, e.kind) == ("gpu001", "0000:3b:00", "gpu_ecc_dbe")


def _pack_with(tmp_path, text: str):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    (pack / "metrics.yaml").write_text(text)
    return pack


def test_a_metric_rule_with_an_unknown_kind_is_refused_with_its_line(tmp_path):
    pack = _pack_with(tmp_path, (ROOT / "rules" / "metrics.yaml").read_text().replace(
        "kind: gpu_row_remap_failure\n", "kind: gpu_row_remap_flop\n", 1))
    with pytest.raises(RulePackError) as exc:
        load_rules(pack)
    assert any(p.path.endswith("metrics.yaml") and p.line and "unknown kind 'gpu_row_remap_flop'" in p.message
               for p in exc.value.problems)


def test_a_metric_rule_needs_kind_or_catalog_and_a_known_trigger(tmp_path):
    pack = _pack_with(tmp_path, "type: metric_rules\nlabels: {node: Hostname}\nrules:\n"
                                "  - id: metrics.x\n    metric: X\n    trigger: sometimes\n"
                                "    examples: [{values: [0], expect: []}]\n")
    with pytest.raises(RulePackError) as exc:
        load_rules(pack)
    assert any("trigger" in p.message for p in exc.value.problems)


def test_a_wrong_example_is_reported_by_the_check(tmp_path):
    pack = _pack_with(tmp_path, (ROOT / "rules" / "metrics.yaml").read_text().replace(
        "values: [0, 0, 1, 1]\n        expect: [{step: 2,", "values: [0, 0, 1, 1]\n        expect: [{step: 3,", 1))
    problems = check_examples(load_rules(pack), example_context())
    assert len(problems) == 1
    assert "metrics.dcgm_ecc_dbe_volatile" in problems[0].message and "step is 2" in problems[0].message
