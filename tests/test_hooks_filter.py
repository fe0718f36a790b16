"""hooks/suspicious.patterns, the epilog's cheap filter, lets through every line a node-log rule can match.

If it did not, a clean-looking job whose node had a real fault would skip Python and lose the event."""

from __future__ import annotations

import subprocess

from attribution.rulepack.load import load_rules

from .conftest import ROOT

PATTERNS = [p for p in (ROOT / "hooks" / "suspicious.patterns").read_text().splitlines() if p]
NODE_SOURCES = {"kernel", "fabricmanager", "node"}


def test_every_node_rule_example_passes_the_filter():
    rs = load_rules(ROOT / "rules")
    missed = []
    for rule in rs.rules:
        if not set(rule.sources) & NODE_SOURCES:
            continue
        for ex in rule.examples:
            if ex.source in NODE_SOURCES and not any(p in ex.line for p in PATTERNS):
                missed.append((rule.id, ex.line))
    assert missed == []


def test_the_filter_is_what_grep_reads(tmp_path):
    log = tmp_path / "k.log"
    log.write_text("[Tue Mar 10 09:14:37 2026] mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link ACTIVE\n")
    grep = ["grep", "-F", "-q", "-f", str(ROOT / "hooks" / "suspicious.patterns"), str(log)]
    assert subprocess.run(grep).returncode == 1
    with open(log, "a") as f:
        f.write("[Tue Mar 10 09:14:38 2026] NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus.\n")
    assert subprocess.run(grep).returncode == 0
