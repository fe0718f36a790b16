"""Shared fixtures. Each test module covers one source module (STYLE.md); helpers live in tests/harness."""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.rulepack import load_rules

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = ROOT / "tests" / "incidents"
CASES = ROOT / "tests" / "cases"


@pytest.fixture(scope="session")
def ruleset():
    return load_rules(ROOT / "rules")


def bundles(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / "context.yaml").is_file())
