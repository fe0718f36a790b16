"""A database filled the way `attribution demo` fills one: the example incidents and a generated fleet history.

Fixture ``demo_store`` (module scope): an engine on a fresh migrated database (copied from the session's
template, like ``store``) holding tests/incidents and fleetgen.history(weeks=DEMO_WEEKS) ending now, as
`attribution demo` makes it, ingested through the normal pipeline, with the rule pack's drain policy loaded as
`attribution drain plan` loads it (the drain_candidates view evaluates the loaded policy against now()). Dropped
after the module. It yields a DemoStore: the engine, its URL and the end of the generated history.
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from attribution.fleetgen import history, write_bundle
from attribution.pipeline.ingest import ingest_bundle

ROOT = Path(__file__).resolve().parents[2]
INCIDENTS = ROOT / "tests" / "incidents"
DEMO_WEEKS = 8


@dataclass(frozen=True)
class DemoStore:
    engine: object  # sqlalchemy Engine
    url: str
    end: datetime


def incident_bundles() -> list[Path]:
    return sorted(p for p in INCIDENTS.iterdir() if (p / "context.yaml").is_file()) if INCIDENTS.is_dir() else []


def load_drain_policy(engine, ruleset) -> bool:
    """Make the rule pack's drain policy the one the drain_candidates view evaluates; False when this checkout
    has no drain policy yet."""
    try:
        from attribution.drain.policy import load_policy
        from attribution.store.drain import load_policy as store_policy
    except ImportError:
        return False
    store_policy(engine, load_policy(ruleset))
    return True


def fill_demo(engine, ruleset, end: datetime, weeks: int = DEMO_WEEKS) -> int:
    """Ingest the example incidents and the generated history; returns the number of jobs ingested."""
    n = 0
    for b in incident_bundles():
        ingest_bundle(ruleset, engine, b)
        n += 1
    with tempfile.TemporaryDirectory(prefix="attribution-demo-") as tmp:
        for job in history(weeks=weeks, end=end):
            ingest_bundle(ruleset, engine, write_bundle(job, Path(tmp)))
            n += 1
    load_drain_policy(engine, ruleset)
    return n


#: Jobs whose only hardware evidence is counter snapshots, one node a week apart: GPU 3 of ash-h100-02 counts
#: uncorrectable ECC errors and a remapped row in job 5530917 (case 19), and is gone in job 5531204 (case 23).
COUNTER_CASES = ("19-ecc-counters-grew-nccl-errors-only", "23-gpu-vanished-between-snapshots")


def ingest_counter_cases(engine, ruleset) -> None:
    for case in COUNTER_CASES:
        ingest_bundle(ruleset, engine, ROOT / "tests" / "cases" / case)


@dataclass(frozen=True)
class DemoTemplate:
    name: str  # a database holding the demo data, used only as a template
    end: datetime


@pytest.fixture(scope="session")
def demo_template(pg_server, pg_template, ruleset):
    """The demo data, filled once per session into a database that each module's `demo_store` is copied from
    (CREATE DATABASE ... TEMPLATE: a file copy, far quicker than filling it again)."""
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    name = f"test_demo_tmpl_{uuid.uuid4().hex[:10]}"
    pg_server.ensure_up()
    url = pg_server.create_database(name, template=pg_template)
    engine = make_engine(Target(make_url(url), embedded=False), Settings(), pool_size=4)
    end = datetime.now(timezone.utc)
    try:
        fill_demo(engine, ruleset, end)
    finally:
        engine.dispose()  # a template database must have no connections when it is copied
    try:
        yield DemoTemplate(name, end)
    finally:
        pg_server.ensure_up()
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
def demo_store(pg_server, demo_template):
    """A module's own copy of the demo data (a module may add to it: counter jobs, drains)."""
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    name = f"test_demo_{uuid.uuid4().hex[:10]}"
    pg_server.ensure_up()
    url = pg_server.create_database(name, template=demo_template.name)
    engine = make_engine(Target(make_url(url), embedded=False), Settings(), pool_size=4)
    try:
        yield DemoStore(engine, url, demo_template.end)
    finally:
        engine.dispose()
        pg_server.ensure_up()
        pg_server.drop_database(name)
