"""Redaction never changes a verdict: every bundle of tests/ (incidents, cases, realworld) gives the same outcome,
culprits, root cause (kind, node, GPU), action and confidence with the pack's redactions (rules/redactions.yaml)
as without them, and the same events but for their redacted text (docs/security.md "Secrets in job output")."""

from __future__ import annotations

import pytest

from attribution.pipeline.diagnose import diagnose_bundle
from attribution.rulepack.load import load_rules

from tests.conftest import CASES, INCIDENTS, ROOT, bundles
from tests.harness.secrets_case import CASE, pack_without_redactions

ALL = bundles(INCIDENTS) + bundles(CASES) + bundles(ROOT / "tests" / "realworld")


@pytest.fixture(scope="module")
def unredacted(tmp_path_factory):
    return load_rules(pack_without_redactions(tmp_path_factory.mktemp("pack")))


def _decision(v) -> dict:
    root = v.root_cause
    return {"outcome": v.outcome, "culprits": sorted(v.culprits, key=str), "action": v.action,
            "confidence": v.confidence, "root": (root.kind, root.node, root.gpu) if root else None}


def _events(d) -> list[tuple]:
    return [(e.kind, e.rule, e.location, e.node, e.gpu, e.code, e.rank, e.time) for e in d.events]


def test_the_bundles_are_all_there():
    assert len(ALL) > 100 and CASE in ALL


@pytest.mark.parametrize("bundle", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_redaction_changes_no_verdict(ruleset, unredacted, bundle):
    assert ruleset.redactions.patterns and not unredacted.redactions.patterns
    with_redaction, without = diagnose_bundle(ruleset, bundle), diagnose_bundle(unredacted, bundle)
    assert _decision(with_redaction.verdict) == _decision(without.verdict)
    assert _events(with_redaction) == _events(without)


def test_the_secrets_case_is_redacted_and_still_matched(ruleset, unredacted):
    """The case where it matters: its events' lines hold secrets without the redactions, none with them."""
    with_redaction, without = diagnose_bundle(ruleset, CASE), diagnose_bundle(unredacted, CASE)
    assert any("s3cret" in e.message for e in without.events)
    assert not any("s3cret" in e.message or "s3cret" in e.line for e in with_redaction.events)
    assert any("[redacted:url_password]" in e.message for e in with_redaction.events)
