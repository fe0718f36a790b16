"""hooks/suspicious.patterns, the epilog's cheap filter, is generated from the pack and lets through every line a
node-log rule can match.

If it did not, a clean-looking job whose node had a real fault would skip Python and lose the event."""

from __future__ import annotations

import shutil
import subprocess
import sys

from attribution.pipeline.rulecheck import check_pack
from attribution.rulepack.hookfilter import HOOK_SOURCES, error_lines_text, filter_text, hook_looks_for
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT

FILTER = ROOT / "hooks" / "suspicious.patterns"
PATTERNS = [p for p in FILTER.read_text().splitlines() if p]


def test_the_shipped_filter_is_what_the_pack_generates():
    assert FILTER.read_text() == filter_text(load_rules(ROOT / "rules"))


def test_the_shipped_error_line_patterns_are_what_the_pack_generates():
    assert (ROOT / "hooks" / "error-lines.patterns").read_text() == error_lines_text(load_rules(ROOT / "rules"))


def test_every_node_rule_example_passes_the_filter():
    rs = load_rules(ROOT / "rules")
    missed = []
    for rule in rs.rules:
        if not hook_looks_for(rs, rule):
            continue
        for ex in rule.examples:
            if ex.source in HOOK_SOURCES and not any(p in ex.line for p in PATTERNS):
                missed.append((rule.id, ex.line))
    assert missed == []


def test_a_boot_makes_no_job_worth_a_look():
    """The kernel's banner (a kind with `life: boot`) is a node rule the filter leaves out: a clean job on a node
    that booted minutes before it starts no Python (its report would carry the boot time, not a fault)."""
    rs = load_rules(ROOT / "rules")
    banner = next(r for r in rs.rules if r.id == "kernel.boot_banner")
    assert not hook_looks_for(rs, banner) and banner.examples
    assert not any(p in ex.line for ex in banner.examples for p in PATTERNS)


def test_the_filter_is_what_grep_reads(tmp_path):
    log = tmp_path / "k.log"
    log.write_text("[Tue Mar 10 09:14:37 2026] mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link ACTIVE\n")
    grep = ["grep", "-F", "-q", "-f", str(FILTER), str(log)]
    assert subprocess.run(grep).returncode == 1
    with open(log, "a") as f:
        f.write("[Tue Mar 10 09:14:38 2026] NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus.\n")
    assert subprocess.run(grep).returncode == 0


def _repo_copy(tmp_path):
    """rules/ and hooks/ side by side, as in the repository (rules check finds the filter beside the pack)."""
    shutil.copytree(ROOT / "rules", tmp_path / "rules")
    shutil.copytree(ROOT / "hooks", tmp_path / "hooks")
    return tmp_path / "rules", tmp_path / "hooks" / "suspicious.patterns"


def test_a_filter_that_lacks_a_node_rules_string_fails_the_check_at_the_rule(tmp_path):
    pack, filt = _repo_copy(tmp_path)
    filt.write_text("".join(f"{p}\n" for p in PATTERNS if p != "SXid"))
    problems, _ = check_pack(pack)
    line = next(i for i, l in enumerate((pack / "kernel.yaml").read_text().splitlines(), 1)
                if l.strip() == "- id: kernel.sxid")
    assert [(p.path, p.line) for p in problems] == [(str(pack / "kernel.yaml"), line)]
    assert "lacks 'SXid'" in problems[0].message
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "rules", "check", str(pack)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and r.stdout.startswith(f"{pack / 'kernel.yaml'}:{line}: rule kernel.sxid:")


def test_a_new_node_rule_without_filter_strings_fails_and_with_them_the_stale_filter_fails(tmp_path):
    pack, filt = _repo_copy(tmp_path)
    rule = ("type: rules\nrules:\n  - id: kernel.zz_test\n    source: kernel\n"
            "    pattern: 'zzfault detected on (?P<gpu>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})'\n    kind: nccl_error\n"
            "    examples: {match: [{line: 'zzfault detected on 0000:01:00'}], no_match: ['zzfault gone']}\n")
    (pack / "zz.yaml").write_text(rule)
    problems, _ = check_pack(pack)
    assert [(p.path, p.line) for p in problems] == [(str(pack / "zz.yaml"), 3)]
    assert "needs hook_filter" in problems[0].message
    (pack / "zz.yaml").write_text(rule.replace("    kind:", "    hook_filter: [zzfault detected]\n    kind:"))
    problems, _ = check_pack(pack)
    assert [(p.path, p.line) for p in problems] == [(str(pack / "zz.yaml"), 3)] and "lacks 'zzfault detected'" in \
        problems[0].message
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "rules", "filter", str(pack)], capture_output=True,
                       text=True, check=True)
    filt.write_text(r.stdout)
    assert check_pack(pack)[0] == []
    assert r.stdout.splitlines()[-1] == "zzfault detected"


def test_a_filter_string_no_rule_names_fails_at_its_line_in_the_filter(tmp_path):
    pack, filt = _repo_copy(tmp_path)
    filt.write_text(filt.read_text() + "Call Trace\n")
    problems, _ = check_pack(pack)
    assert [(p.path, p.line) for p in problems] == [(str(filt), len(PATTERNS) + 1)]


def test_an_example_outside_its_own_filter_strings_fails(tmp_path):
    pack, _ = _repo_copy(tmp_path)
    k = pack / "kernel.yaml"
    k.write_text(k.read_text().replace("hook_filter: ['LustreError']", "hook_filter: ['LustreErr0r']"))
    problems, _ = check_pack(pack, hook_filter=tmp_path / "hooks" / "suspicious.patterns")
    msgs = [p.message for p in problems]
    assert any("rule kernel.lustre_error: example holds none of its hook_filter strings" in m for m in msgs), msgs


def test_a_changed_error_line_pattern_makes_the_node_copy_stale_until_regenerated(tmp_path):
    pack, filt = _repo_copy(tmp_path)
    errs = pack / "replay" / "error-lines.txt"
    errs.write_text(errs.read_text() + "\\bbrownout\\b\n")
    problems, _ = check_pack(pack)
    assert [p.path for p in problems] == [str(filt.parent / "error-lines.patterns")]
    assert "attribution rules filter --error-lines" in problems[0].message
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "rules", "filter", "--error-lines", str(pack)],
                       capture_output=True, text=True, check=True)
    (filt.parent / "error-lines.patterns").write_text(r.stdout)
    assert check_pack(pack)[0] == [] and "\\bbrownout\\b\t=brownout" in r.stdout.splitlines()
