"""Every real-world case (tests/realworld) gives the outcome, culprits and root cause its source thread concluded.

Each case is built around log text that people posted publicly; its expected.yaml was written from what the
thread concluded (maintainer diagnosis, reporter's follow-up, the fix) before the engine ran on it, and its notes
give the source URL and what had to be invented. The folder's README is a table of every case.
"""

from __future__ import annotations


import pytest
import yaml

from tests.conftest import ROOT, bundles
from tests.test_incidents import _check

REALWORLD = ROOT / "tests" / "realworld"


@pytest.mark.parametrize("bundle", bundles(REALWORLD), ids=lambda p: p.name)
def test_realworld_case(ruleset, bundle):
    _check(ruleset, bundle)


@pytest.mark.parametrize("bundle", bundles(REALWORLD), ids=lambda p: p.name)
def test_realworld_case_names_its_public_source(bundle):
    """Every case says where its real lines come from (a URL in `source` or in the notes)."""
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    text = f"{expected.get('source', '')} {expected.get('notes', '')}"
    assert "https://" in text or "http://" in text, bundle.name


def test_readme_lists_every_case():
    readme = (REALWORLD / "README.md").read_text()
    for bundle in bundles(REALWORLD):
        assert f"| {bundle.name} |" in readme, bundle.name
