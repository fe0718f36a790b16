"""store.redact (`attribution db redact`): a newer redaction pack applied to what is already stored, in batches,
with a count per kind; a dry run changes nothing, a second run changes nothing, the events keep their identity
(their fingerprints follow their redacted messages: the same job ingested again adds nothing) and the verdicts
stay the same."""

from __future__ import annotations

import pytest

from sqlalchemy import text

from attribution.extract import redact
from attribution.pipeline.ingest import ingest_bundle
from attribution.rulepack.load import load_rules
from attribution.store.redact import redact_stored

from tests.conftest import INCIDENTS
from tests.harness.secrets_case import CASE, leaked, pack_without_redactions, stored_text


@pytest.fixture
def unredacted(tmp_path):
    return load_rules(pack_without_redactions(tmp_path))


def _run(engine, ruleset, **kw):
    red = ruleset.redactions
    return redact_stored(engine, lambda s: redact.redact_counted(red, s), lambda d: redact.redact_kept(red, d),
                         lambda d: redact.redact_document(red, d), **kw)


def _verdicts(engine) -> list[tuple]:
    with engine.connect() as c:
        return c.execute(text("SELECT job_id, id, outcome, confidence, action, root_kind, root_node, culprit_nodes "
                              "FROM attribution.verdicts ORDER BY job_id, id")).all()


def test_what_a_pack_without_redactions_stored_is_redacted_in_batches(ruleset, unredacted, store):
    ingest_bundle(unredacted, store, CASE)
    ingest_bundle(unredacted, store, INCIDENTS / "02-xid48-dbe-ecc-xid31")
    before = stored_text(store)
    assert set(leaked(before)) >= {"hunter2", "s3cret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                                   "ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB"}
    verdicts = _verdicts(store)

    dry = _run(store, ruleset, batch=3, dry_run=True)
    assert stored_text(store) == before
    assert dry.events.changed and dry.evidence.changed == 1 and dry.verdicts.changed

    done = _run(store, ruleset, batch=3)
    assert done.as_dict() | {"dry_run": True} == dry.as_dict()
    assert done.events.rows > 3 and done.evidence.rows == 2  # several batches, rows without secrets left as they were
    assert leaked(stored_text(store)) == []
    kinds = done.kinds()
    assert {"password", "url_password", "aws_secret_access_key", "github_token"} <= set(kinds)
    assert kinds == {k: done.events.kinds.get(k, 0) + done.evidence.kinds.get(k, 0) + done.verdicts.kinds.get(k, 0)
                     for k in kinds}
    assert done.fingerprints_updated == done.events.changed and done.fingerprints_kept == 0
    assert done.digests_kept == 0
    assert _verdicts(store) == verdicts

    again = _run(store, ruleset, batch=3)
    assert (again.events.changed, again.evidence.changed, again.verdicts.changed) == (0, 0, 0)
    assert again.kinds() == {}


def _documents(engine) -> list[dict]:
    with engine.connect() as c:
        return c.execute(text("SELECT document FROM attribution.verdicts ORDER BY id")).scalars().all()


def test_the_job_ingested_again_with_the_new_pack_adds_nothing(ruleset, unredacted, store):
    """Its events' fingerprints were recomputed over their redacted messages: no new event. Its verdict is the
    new pack's (a new row: it names the pack's version) and says what the redacted one said, word for word."""
    ingest_bundle(unredacted, store, CASE)
    _run(store, ruleset)
    result, verdict = ingest_bundle(ruleset, store, CASE)
    assert result.new_events == 0 and result.linked_events == 0
    old, new = _documents(store)
    assert old["rules_version"] != new["rules_version"]
    assert old | {"rules_version": None} == new | {"rules_version": None}


def test_a_fingerprint_that_cannot_be_reproduced_is_kept(ruleset, unredacted, store):
    """A row whose stored fingerprint its columns do not give again (an older rule, a lost link) keeps it."""
    ingest_bundle(unredacted, store, CASE)
    with store.begin() as c:
        c.execute(text("UPDATE attribution.events SET fingerprint = decode(md5(CAST(id AS text)), 'hex') "
                       "WHERE message LIKE '%s3cret%'"))
        odd = c.execute(text("SELECT id, fingerprint FROM attribution.events WHERE message LIKE '%s3cret%'")).all()
    assert odd
    res = _run(store, ruleset)
    assert res.fingerprints_kept == len(odd) and res.fingerprints_updated == res.events.changed - len(odd)
    with store.connect() as c:
        assert c.execute(text("SELECT id, fingerprint FROM attribution.events WHERE id = ANY(:ids) ORDER BY id"),
                         {"ids": [r[0] for r in odd]}).all() == sorted(odd)
    assert leaked(stored_text(store)) == []
