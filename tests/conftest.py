"""Shared fixtures. Each test module covers one source module (STYLE.md); helpers live in tests/harness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attribution.rulepack.load import load_rules
from tests.harness.slurm_versions import PARAMS as SLURM_PARAMS

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


pytest_plugins = ["tests.harness.pg", "tests.harness.demo_store"]  # demo_template: the demo data, once a session

#: Markers that make a test slow whatever it does: a real Slurm cluster, Prometheus server or browser.
SLOW_BY_NATURE = ("slurm", "prometheus", "browser")


def pytest_collection_modifyitems(items):
    """`slow` (left out by `scripts/test --fast`): every Slurm, Prometheus and browser test, besides the tests
    marked slow by hand (over ~3 s on two busy cores)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_BY_NATURE) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def slurm24_root():
    """The cached Debian 13 root with Slurm 24.11 (built on first use: about 95 s cold; tests/harness/debroot.py)."""
    from .harness.debroot import ensure_root

    if os.geteuid() != 0:
        pytest.skip("the Slurm test clusters need root")
    root, manifest = ensure_root()
    print(f"\nSlurm 24.11 root {root}: {'cached' if manifest['cached'] else 'built'} in "
          f"{manifest['ensure_seconds'] if manifest['cached'] else manifest['build_seconds']} s")
    return root, manifest


@pytest.fixture(scope="module", params=SLURM_PARAMS)
def slurm(request):
    """The Slurm version of this module's real-Slurm tests (each runs once per version): a SlurmVersion whose
    ``cluster(base, ...)`` makes the cluster."""
    from .harness.debroot import python_binds
    from .harness.slurm_versions import HOST_VERSION, SlurmVersion

    if os.geteuid() != 0:
        pytest.skip("the Slurm test clusters need root")
    if request.param == HOST_VERSION:
        return SlurmVersion(HOST_VERSION)
    from .harness.hooknode import SAFE_ROOT, safe_root

    root, manifest = request.getfixturevalue("slurm24_root")
    safe_root()  # the hooks' hook.env folders, seen at the same path inside the root
    return SlurmVersion(request.param, root=root, binds=[ROOT, SAFE_ROOT, *python_binds()], manifest=manifest)


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


# -- a real `attribution serve` on its own database, for the hooks' tests (one per module) ----------------------

#: The report token the hooks' tests give their nodes: it speaks for nodes n1-n4 of cluster `hard` only
NODE_TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def node_db(pg_server, pg_template):
    import uuid

    name = f"node_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
def node_service(node_db, tmp_path_factory):
    from tests.harness.service import start_service

    svc = start_service(node_db, tmp_path_factory.mktemp("node-service"),
                        extra_tokens=f"report {NODE_TOKEN} n1-token cluster=hard nodes=n[1-4]\n")
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def node_engine(node_db):
    from sqlalchemy import create_engine

    engine = create_engine(node_db)
    try:
        yield engine
    finally:
        engine.dispose()
