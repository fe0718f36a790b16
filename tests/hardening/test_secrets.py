"""Issue 29, "Secrets never stored": a job whose output holds a password, a database URL with its password, an AWS
secret key, a GitHub token and one secret of every other kind of rules/redactions.yaml (tests/cases/24), ingested
through the bundle path, leaves none of them in any table, in `attribution show --json`, in the service's verdict
answer or its diagnosis of the uploaded bundle, in the dashboard's job page, or in `rules suggest`: each is
`[redacted:KIND]` wherever its line went (docs/security.md "Secrets in job output")."""

from __future__ import annotations

import io
import json
import re
import tarfile
import uuid

import httpx
import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.pipeline.ingest import ingest_bundle

from tests.harness.secrets_case import CASE, SECRETS, leaked, stored_text
from tests.harness.service import start_service

CLUSTER, JOB = "ash", "5531377"
#: The kinds whose lines the store keeps (an event's line or a kept error-looking line), so each must show up
#: redacted in the store.
KINDS = ("password", "url_password", "aws_secret_access_key", "aws_access_key_id", "github_token", "gitlab_token",
         "huggingface_token", "azure_account_key", "azure_sas_signature", "slack_token", "slack_webhook", "jwt",
         "authorization", "gcp_api_key", "secret", "high_entropy_secret", "private_key")


@pytest.fixture(scope="module")
def stored(ruleset, pg_server, pg_template, tmp_path_factory):
    """A database holding the job, ingested from its bundle, and the service on it."""
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    name = f"secrets_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    engine = make_engine(Target(make_url(url), embedded=False), Settings(), pool_size=2)
    ingest_bundle(ruleset, engine, CASE)
    svc = start_service(url, tmp_path_factory.mktemp("secrets-service"))
    try:
        yield url, engine, svc
    finally:
        svc.stop()
        engine.dispose()
        pg_server.drop_database(name)


def test_the_job_output_holds_every_secret():
    """So that every check below can fail."""
    assert leaked((CASE / "job" / "slurm-5531377.out").read_text()) == list(SECRETS)


def test_no_table_holds_a_secret_and_every_kind_was_stored_redacted(stored):
    _, engine, _ = stored
    everything = stored_text(engine)
    assert leaked(everything) == []
    assert [k for k in KINDS if f"[redacted:{k}]" not in everything] == []


def test_show_json_holds_no_secret(stored):
    url, _, _ = stored
    r = CliRunner().invoke(main, ["show", "--json", CLUSTER, JOB], env={"ATTRIBUTION_DATABASE_URL": url})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["outcome"] == "application" and "[redacted:" in r.stdout
    assert leaked(r.stdout) == []


def test_the_service_s_verdict_and_diagnosis_hold_no_secret(stored):
    _, _, svc = stored
    r = httpx.get(f"{svc.url}/v1/jobs/{CLUSTER}/{JOB}/verdict", headers=svc.auth("read"), timeout=60)
    assert r.status_code == 200 and "[redacted:url_password]" in r.text
    assert leaked(r.text) == []
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(CASE, arcname=CASE.name)
    r = httpx.post(f"{svc.url}/v1/diagnose", content=buf.getvalue(), timeout=120,
                   headers={**svc.auth("read"), "Content-Type": "application/gzip"})
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "application" and leaked(r.text) == []


def test_the_dashboard_s_job_page_holds_no_secret(stored):
    _, _, svc = stored
    with httpx.Client(base_url=svc.url, timeout=60) as client:
        assert client.post("/ui/login", data={"token": svc.tokens["read"]}).status_code == 303
        page = client.get(f"/ui/jobs/{CLUSTER}/{JOB}")
    assert page.status_code == 200 and "[redacted:" in page.text
    assert leaked(page.text) == []


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_rules_suggest_holds_no_secret(stored, form):
    url, _, _ = stored
    r = CliRunner().invoke(main, ["rules", "suggest", "--min-jobs", "1", *form],
                           env={"ATTRIBUTION_DATABASE_URL": url})
    assert r.exit_code == 0, r.output
    assert re.search(r"\[redacted:\w+\]", r.stdout) and "kind: TODO" in r.stdout  # skeletons of the lines
    assert leaked(r.stdout) == []
