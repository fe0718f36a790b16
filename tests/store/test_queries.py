"""sql/queries: every example question runs on a store filled with a generated history, and answers it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import text

from attribution.fleetgen import ECC_GPU, ECC_NODE, history, write_bundle
from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import INCIDENTS, ROOT

pytestmark = pytest.mark.slow  # each query runs over a generated fleet history

QUERIES = sorted((ROOT / "sql" / "queries").glob("*.sql"))


@pytest.fixture
def filled(ruleset, store, tmp_path):
    for j in history(weeks=8, end=datetime.now(timezone.utc)):
        ingest_bundle(ruleset, store, write_bundle(j, tmp_path))
    for b in sorted(INCIDENTS.iterdir()):
        if (b / "context.yaml").is_file():
            ingest_bundle(ruleset, store, b)
    return store


def _run(engine, path):
    with engine.connect() as c:
        return c.execute(text(path.read_text())).mappings().all()


@pytest.mark.parametrize("query", QUERIES, ids=lambda p: p.stem)
def test_query_runs_and_says_which_question_it_answers(filled, query):
    first = query.read_text().splitlines()[0]
    assert first.startswith("-- ") and first.rstrip().endswith("?"), "the first line states the question"
    _run(filled, query)


def test_repeated_uncorrectable_ecc_finds_the_bad_gpu(filled):
    rows = _run(filled, ROOT / "sql" / "queries" / "gpus_repeated_uncorrectable_ecc_30d.sql")
    assert [(r["cluster"], r["node"], r["gpu"]) for r in rows] == [("demo", ECC_NODE, ECC_GPU)]
    assert rows[0]["events"] >= 2


def test_failed_gpu_hours_cover_every_failed_job(filled):
    rows = _run(filled, ROOT / "sql" / "queries" / "failed_gpu_hours_by_outcome_per_week.sql")
    with filled.connect() as c:
        failed = c.execute(text("SELECT count(*) FROM attribution.job_verdicts WHERE outcome <> 'none'")).scalar()
    assert sum(r["jobs"] for r in rows) == failed
    assert all(r["gpu_hours"] > 0 for r in rows)


def test_culprit_count_puts_the_nvlink_lemon_first(filled):
    rows = _run(filled, ROOT / "sql" / "queries" / "lemon_nodes_culprit_count.sql")
    assert (rows[0]["cluster"], rows[0]["node"], rows[0]["failed_jobs"]) == ("demo", "dgx017", 5)
