"""Loading a rule pack: validation once at the boundary, every problem as path:line: message."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from attribution.errors import RulePackError
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT


def _copy(tmp_path):
    dst = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", dst)
    return dst


def _problems(directory) -> list[str]:
    with pytest.raises(RulePackError) as exc:
        load_rules(directory)
    return [str(p) for p in exc.value.problems]


def test_the_shipped_pack_loads(ruleset):
    assert ruleset.rules and ruleset.kinds and ruleset.graph.edges
    assert len(ruleset.version) == 64


def test_version_changes_with_any_rule_file(tmp_path):
    d = _copy(tmp_path)
    v1 = load_rules(d).version
    (d / "nccl.yaml").write_text((d / "nccl.yaml").read_text() + "\n# an operator's comment\n")
    assert load_rules(d).version != v1


def test_schema_violation_is_reported_with_its_line(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\n"
        "rules:\n"
        "  - id: local.bad\n"
        "    source: kernel\n"
        "    pattern: 'x'\n"
        "    kind: nccl_error\n"
        "    severity: apocalyptic\n"
        "    examples: {match: [{line: x}]}\n")
    probs = _problems(d)
    assert any(p.startswith(f"{d}/local.yaml:7:") and "severity" in p for p in probs), probs


def test_backtracking_regex_unknown_kind_and_duplicate_id_all_reported(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\n"
        "rules:\n"
        "  - id: local.backref\n"
        "    source: job\n"
        "    pattern: '(a+)+\\1'\n"
        "    kind: nccl_error\n"
        "    examples: {match: [{line: aa}], no_match: [b]}\n"
        "  - id: local.lookahead\n"
        "    source: job\n"
        "    pattern: 'CUDA error: (?!out of memory)'\n"
        "    kind: no_such_kind\n"
        "    examples: {match: [{line: x}], no_match: [b]}\n"
        "  - id: job.nccl_warn\n"
        "    source: job\n"
        "    pattern: 'x'\n"
        "    kind: nccl_error\n"
        "    examples: {match: [{line: x}], no_match: [b]}\n")
    probs = "\n".join(_problems(d))
    assert f"{d}/local.yaml:5: pattern rejected by RE2" in probs
    assert f"{d}/local.yaml:10: pattern rejected by RE2" in probs
    assert f"{d}/local.yaml:11: unknown kind 'no_such_kind'" in probs
    dup = [x for x in probs.splitlines() if "rule id 'job.nccl_warn' already used" in x]
    assert len(dup) == 1 and f"{d}/local.yaml:13" in dup[0] and f"{d}/nccl.yaml:" in dup[0]


def test_malformed_yaml(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text("type: rules\nrules:\n  - id: [unclosed\n")
    probs = _problems(d)
    assert len(probs) == 1 and probs[0].startswith(f"{d}/local.yaml:") and "malformed YAML" in probs[0]


def test_caret_only_anchors_the_start(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\nrules:\n  - id: local.caret\n    source: job\n    pattern: 'a(?:^|b)'\n"
        "    kind: nccl_error\n    examples: {match: [{line: ab}], no_match: [c]}\n")
    assert any("'^' may only anchor" in p for p in _problems(d))


def test_catalog_with_dangling_kind(tmp_path):
    d = _copy(tmp_path)
    p = d / "catalogs" / "xid.yaml"
    p.write_text(p.read_text().replace("kind: gpu_ecc_dbe", "kind: gpu_ecc_dbee", 1))
    assert any("xid.yaml" in x and "unknown kind 'gpu_ecc_dbee'" in x for x in _problems(d))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "attribution.cli", *args], capture_output=True, text=True)


def test_rules_check_command_passes_on_the_shipped_pack():
    r = _cli("rules", "check", str(ROOT / "rules"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout


def test_rules_check_command_fails_with_locations(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\nrules:\n  - id: local.x\n    source: kernel\n    pattern: 'NVRM: Xid'\n"
        "    kind: nccl_error\n    examples: {match: [{line: 'nothing to see'}], no_match: ['NVRM: Xid']}\n")
    r = _cli("rules", "check", str(d))
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert any(x.startswith(f"{d}/local.yaml:3: rule local.x: example does not match") for x in lines), r.stdout
    assert any("near-miss matches" in x for x in lines)
    assert "Traceback" not in r.stderr


def test_rules_check_json_says_ok_or_lists_the_problems_with_the_same_exit_code(tmp_path):
    import json

    good = _cli("rules", "check", "--json", str(ROOT / "rules"))
    assert good.returncode == 0, good.stdout + good.stderr
    doc = json.loads(good.stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["summary"].startswith(f"{ROOT / 'rules'}: ")
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\nrules:\n  - id: local.x\n    source: kernel\n    pattern: 'NVRM: Xid'\n"
        "    kind: nccl_error\n    examples: {match: [{line: 'nothing to see'}], no_match: ['NVRM: Xid']}\n")
    bad = _cli("rules", "check", "--json", str(d))
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False and doc["summary"] is None
    assert any(p.startswith(f"{d}/local.yaml:3: rule local.x: example does not match") for p in doc["problems"])
    broken = d / "kinds.yaml"
    broken.write_text("type: kinds\nkinds: [\n")
    doc = json.loads(_cli("rules", "check", "--json", str(d)).stdout)
    assert doc["ok"] is False and any(p.startswith(f"{broken}:") for p in doc["problems"])


def _line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("name, text", [
    ("catalogs/xid.yaml", "action: reset_gpu"),
    ("kinds.yaml", "action: drain_node"),
    ("job-states.yaml", "action: resubmit"),
    ("metrics.yaml", "action: drain_node"),
])
def test_an_unknown_action_anywhere_in_the_pack_is_refused_with_its_line(tmp_path, name, text):
    """One vocabulary of actions (rules/schema/defs.schema.json) for every schema: a typo never reaches a verdict."""
    d = _copy(tmp_path)
    p = d / name
    line = _line_of(p, text)
    p.write_text(p.read_text().replace(text, text.replace(text.split(": ")[1], "drain_nodes"), 1))
    probs = [x for x in _problems(d) if "drain_nodes" in x]
    assert probs and all(x.startswith(f"{p}:{line}: ") for x in probs), probs


def test_a_rule_action_outside_the_vocabulary_is_refused(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\nrules:\n  - id: local.x\n    source: job\n    pattern: 'zz'\n    kind: nccl_error\n"
        "    action: drain_nodes\n    examples: {match: [{line: zz}], no_match: [y]}\n")
    assert [x for x in _problems(d) if "drain_nodes" in x] == [
        f"{d}/local.yaml:7: rules/0/action: 'drain_nodes' is not one of ['none', 'resubmit', 'fix_application', "
        f"'reset_gpu', 'drain_node', 'inspect_fabric', 'inspect_network', 'investigate']"]


def test_a_rule_without_a_near_miss_is_refused_with_its_line(tmp_path):
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: rules\nrules:\n  - id: local.x\n    source: job\n    pattern: 'zz'\n    kind: nccl_error\n"
        "    examples: {match: [{line: zz}]}\n  - id: local.y\n    source: job\n    pattern: 'yy'\n"
        "    kind: nccl_error\n    examples: {match: [{line: yy}], no_match: []}\n")
    probs = _problems(d)
    assert any(x.startswith(f"{d}/local.yaml:7: rules/0/examples: 'no_match' is a required property") for x in probs)
    assert any(x.startswith(f"{d}/local.yaml:12: rules/1/examples/no_match: [] should be non-empty") for x in probs)


def test_a_redaction_pattern_is_checked_like_a_rule_s(tmp_path):
    """rules/redactions.yaml (type: redactions): RE2 only, the secret as the only capture, a span that is in its
    line, ids unique across the pack: every problem with its line."""
    d = _copy(tmp_path)
    (d / "local.yaml").write_text(
        "type: redactions\n"
        "patterns:\n"
        "  - id: redact.local.lookahead\n"
        "    kind: local\n"
        "    pattern: 'pass=(?!x)'\n"
        "    examples: {redact: [{line: 'pass=y', span: y}], keep: [b]}\n"
        "  - id: redact.local.groups\n"
        "    kind: local\n"
        "    pattern: '(?P<name>\\w+)=(?P<secret>\\S+)'\n"
        "    examples: {redact: [{line: 'a=b', span: zz}], keep: [b]}\n"
        "  - id: redact.password.bare\n"
        "    kind: local\n"
        "    pattern: 'x'\n"
        "    examples: {redact: [{line: x, span: x}], keep: [b]}\n")
    probs = "\n".join(_problems(d))
    assert f"{d}/local.yaml:5: pattern rejected by RE2" in probs
    assert f"{d}/local.yaml:9: a redaction pattern captures only (?P<secret>...), not name" in probs
    assert f"{d}/local.yaml:10: the span is not in the line" in probs
    assert "rule id 'redact.password.bare' already used" in probs


def test_the_redactions_survive_the_compiled_cache(tmp_path):
    """The node agent's cache (rulepack/cache.py) pickles the redactions with the pack: the same text comes out."""
    from attribution.extract.redact import redact
    from attribution.rulepack.cache import LazySet, cached_rules

    first = cached_rules(ROOT / "rules", tmp_path / "cache")
    again = cached_rules(ROOT / "rules", tmp_path / "cache")
    assert isinstance(again.redactions.matcher, LazySet)  # read back from the cache, not loaded again
    line = "password=hunter2 AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert redact(again.redactions, line) == redact(first.redactions, line) == (
        "password=[redacted:password] AWS_SECRET_ACCESS_KEY=[redacted:aws_secret_access_key]")
