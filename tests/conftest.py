"""Shared fixtures. Each test module covers one source module (STYLE.md); helpers live in tests/harness."""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.rulepack.load import load_rules

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


pytest_plugins = ["tests.harness.pg"]


@pytest.fixture(scope="session")
def pg_template_loaders():
    """Every test database starts migrated to head (the template is built once per run)."""
    from sqlalchemy import create_engine

    from attribution.store import migrate

    def upgrade(url: str) -> None:
        engine = create_engine(url)
        try:
            migrate.upgrade(engine)
        finally:
            engine.dispose()

    return [upgrade]


@pytest.fixture
def store(pg_url):
    """An engine on a fresh migrated database, made the way the product makes it (timeouts, UTC sessions)."""
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    engine = make_engine(Target(make_url(pg_url), embedded=False), Settings(), pool_size=4)
    try:
        yield engine
    finally:
        engine.dispose()
