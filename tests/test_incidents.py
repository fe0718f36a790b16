"""Every labelled incident gives its expected outcome, culprits and root cause (docs/verdict.md).

The expectations come from each incident's story (expected.yaml), written without running this code.
tests/incidents is a byte-identical copy of the shared example set; tests/cases holds this project's own.
"""

from __future__ import annotations

import filecmp
import hashlib
from pathlib import Path

import pytest
import yaml

from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict

from tests.conftest import CASES, INCIDENTS, ROOT, bundles

SHARED = ROOT.parent / "shared" / "incidents"


def _check(ruleset, bundle: Path) -> None:
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    v = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    got_root = v["root_cause"]
    assert v["outcome"] == expected["outcome"], v["explanation"]
    assert sorted(c["node"] for c in v["culprits"]) == sorted(expected.get("culprits") or [])
    exp_root = expected.get("root_cause")
    if exp_root is None:
        assert got_root is None, f"expected no root cause, got {got_root}"
    else:
        assert got_root is not None, v["explanation"]
        assert got_root["kind"] == exp_root["kind"]
        if "node" in exp_root:
            assert got_root["node"] == exp_root["node"]
        if "gpu" in exp_root:  # the root cause's GPU, and that GPU named with its node among the culprits
            assert got_root["gpu"] == exp_root["gpu"]
            assert {"node": exp_root["node"], "gpu": exp_root["gpu"]} in [
                {"node": c["node"], "gpu": c.get("gpu")} for c in v["culprits"]]
    for kind in expected.get("not_root") or []:
        assert got_root is None or got_root["kind"] != kind
    groups = {g["kind"] for g in v["symptom_groups"]}
    for kind in expected.get("symptoms") or []:  # what the lines mean, not only what the job state says
        assert kind in groups, f"no {kind} among the symptoms {sorted(groups)}"
    if expected.get("action"):
        assert v["action"] == expected["action"]


@pytest.mark.parametrize("bundle", bundles(INCIDENTS), ids=lambda p: p.name)
def test_shared_incident(ruleset, bundle):
    _check(ruleset, bundle)


@pytest.mark.parametrize("bundle", bundles(CASES), ids=lambda p: p.name)
def test_own_case(ruleset, bundle):
    _check(ruleset, bundle)


def test_there_are_twelve_shared_incidents():
    assert len(bundles(INCIDENTS)) == 12


#: The copy's one file of our own: its README cites this project's documents (docs/bundle.md, docs/verdict.md),
#: which the wheel carries, where the shared set's cites documents the wheel's users do not have.
OWN_FILES = {"README.md"}


def test_vendored_incidents_are_unchanged():
    """The copy is byte-identical to the shared set (checksums taken when it was copied; and to the shared
    folder itself when it sits beside this checkout), but for its README (OWN_FILES)."""
    manifest = {}
    for line in (INCIDENTS / "MANIFEST.sha256").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        manifest[rel] = digest
    files = {p.relative_to(INCIDENTS).as_posix(): p for p in INCIDENTS.rglob("*")
             if p.is_file() and p.name != "MANIFEST.sha256"}
    assert set(files) == set(manifest)
    for rel, p in files.items():
        if rel not in OWN_FILES:
            assert hashlib.sha256(p.read_bytes()).hexdigest() == manifest[rel], rel
    if SHARED.is_dir():
        shared = {p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*") if p.is_file()}
        assert shared == set(manifest)
        for rel in shared - OWN_FILES:
            assert filecmp.cmp(SHARED / rel, INCIDENTS / rel, shallow=False), rel


EXPECTED_ACTIONS = {
    "01-xid79-fallen-off-bus": "drain_node",
    "02-xid48-dbe-ecc-xid31": "reset_gpu",
    "03-xid94-contained-ecc": "resubmit",
    "04-xid74-nvlink": "drain_node",
    "05-nvswitch-fatal-sxid": "inspect_fabric",
    "06-ib-link-down": "inspect_network",
    "07-app-python-keyerror": "fix_application",
    "08-slurm-oom-kill": "fix_application",
    "10-node-fail-no-logs": "drain_node",
    "11-watchdog-timeout-only": "investigate",
    "12-lustre-eviction-io-error": "investigate",
}


@pytest.mark.parametrize("name,action", sorted(EXPECTED_ACTIONS.items()))
def test_shared_incident_action(ruleset, name, action):
    """The action each incident's notes call for ("Expected action: ...")."""
    v = diagnose_bundle(ruleset, INCIDENTS / name).verdict
    assert v.action == action


def test_missing_node_logs_show_in_coverage(ruleset):
    v = diagnose_bundle(ruleset, INCIDENTS / "10-node-fail-no-logs").verdict
    gaps = [(c.source, c.node, c.status) for c in v.coverage if c.node == "qk0102"]
    assert ("kernel", "qk0102", "missing") in gaps
