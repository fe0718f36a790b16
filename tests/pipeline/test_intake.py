"""pipeline.intake: every bundle's job reported as its reporters report it (one observation document per node,
made by the node collector's code from the node's folder, and the controller's), decoded by the one codec and run
through the one pipeline in any order, ends with the verdict the bundle stored whole gets (ingest_bundle), and
with diagnose_bundle's outcome, culprits and root cause."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import text

from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.ingest import ingest_bundle
from attribution.pipeline.intake import decode_document, ingest_document
from attribution.reports.render import verdict_to_dict

from tests.conftest import CASES, INCIDENTS, ROOT, bundles
from tests.harness.documents import FILTER, documents

ALL = bundles(INCIDENTS) + bundles(CASES) + bundles(ROOT / "tests" / "realworld")


def current_document(engine, cluster: str, job_id: str) -> dict:
    with engine.connect() as c:
        return c.execute(text(
            "SELECT v.document FROM attribution.jobs j JOIN attribution.verdicts v ON v.job_id = j.job_id "
            "AND v.id = j.current_verdict_id WHERE j.cluster = :c AND j.job_id = :j"),
            {"c": cluster, "j": job_id}).scalar_one()


def kept_lines(engine, job_id: str, nodes: set) -> set:
    from attribution.store.evidence import load_evidence

    with engine.begin() as c:
        ref = c.execute(text("SELECT id FROM attribution.jobs WHERE job_id = :j"), {"j": job_id}).scalar_one()
        doc = load_evidence(c, job_id, ref) or {"files": []}
    return {(f["source"], f["node"], f["file"], n, t, flags) for f in doc["files"]
            if f["source"] == "job" or f["node"] in nodes for n, t, flags in f["lines"]}


@pytest.fixture
def second_store(pg_server, pg_template):
    """Another fresh database, for the bundle stored whole."""
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    name = f"whole_{uuid.uuid4().hex[:12]}"
    engine = make_engine(Target(make_url(pg_server.create_database(name, template=pg_template)), embedded=False),
                         Settings(), pool_size=2)
    try:
        yield engine
    finally:
        engine.dispose()
        pg_server.drop_database(name)


@pytest.mark.parametrize("bundle", ALL, ids=lambda p: p.name)
def test_a_bundle_reported_by_its_nodes_and_controller_gets_its_verdict(ruleset, store, second_store, bundle):
    docs = documents(ruleset, bundle)
    for doc in docs[1:] + docs[:1]:  # an order other than the bundle's: the controller before the first node
        ingest_document(ruleset, store, decode_document(json.loads(json.dumps(doc)), "test"))
    ctx = docs[-1]["context"]
    got = current_document(store, ctx["cluster"], ctx["job_id"])
    diagnosed = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    key = ("outcome", "confidence", "action", "culprits", "root_cause")
    assert {k: got[k] for k in key} == {k: diagnosed[k] for k in key}
    ingest_bundle(ruleset, second_store, bundle)
    whole = current_document(second_store, ctx["cluster"], ctx["job_id"])
    # every node that left a folder reported: its coverage is the bundle's (a node without one sent nothing)
    reported = {d["reporter"]["name"] for d in docs[:-1]}
    assert got["coverage"] == [c for c in whole["coverage"] if c["source"] == "job" or c["node"] in reported]
    assert {k: v for k, v in got.items() if k != "coverage"} == {k: v for k, v in whole.items() if k != "coverage"}
    # the lines kept for replay of a failed job (docs/replay.md; a bundle stored whole keeps none of a job that
    # did not fail, its reporters' pieces arrive before any verdict) are the bundle's: each node sent its filter's
    # hits and its error-looking lines, the rest of its logs stayed home. Not a node's boot banner: the filter
    # leaves out the kinds that mark a node's life (rulepack/hookfilter.py), its report carries the boot time.
    strings = [s for s in FILTER.read_text().splitlines() if s]

    def replayable(engine):
        return {x for x in kept_lines(engine, ctx["job_id"], reported)
                if x[0] == "job" or x[5] != "p" or any(s in x[4] for s in strings)}

    if got["outcome"] != "none":
        assert replayable(store) == replayable(second_store)
