"""The store commands on the embedded default: what a new user runs on a machine with no PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attribution.store.migrate import head

from tests.conftest import INCIDENTS


def run(home, *args):
    env = dict(os.environ, ATTRIBUTION_HOME=str(home))
    env.pop("ATTRIBUTION_DATABASE_URL", None)
    env.pop("ATTRIBUTION_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "attribution.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture
def home():
    """A home the embedded server's OS user can enter when the tests run as root (pytest's tmp_path is under a 0700
    folder, and the tool never changes the mode of a folder it did not create)."""
    d = Path(tempfile.mkdtemp(prefix="attribution-home-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _server_running(home) -> bool:
    pid = home / "pg" / "postmaster.pid"
    return pid.exists()


@pytest.mark.slow
def test_demo_on_the_embedded_database(home):
    r = run(home, "demo", "--weeks", "3")
    assert r.returncode == 0, r.stderr
    assert "== 12 example incidents" in r.stdout
    assert "04-xid74-nvlink                  nvlink" in r.stdout
    assert "recurring faults" in r.stdout and "dgx017" in r.stdout and "nvlink_error" in r.stdout
    assert not _server_running(home), "the embedded server must be stopped after the command"


@pytest.mark.slow
def test_ingest_twice_then_status(home):
    b = str(INCIDENTS / "03-xid94-contained-ecc")
    first = run(home, "ingest", b)
    assert first.returncode == 0, first.stderr
    assert "new verdict" in first.stdout and "gpu_hardware" in first.stdout
    again = run(home, "ingest", b)
    assert " 0 new event(s), verdict unchanged" in again.stdout
    st = run(home, "db", "status")
    assert st.returncode == 0 and f"revision  {head()} (newest {head()})" in st.stdout
    assert "kept for replay  1 job(s), " in st.stdout  # the failed job's evidence (docs/replay.md)


@pytest.mark.slow
def test_db_start_keeps_the_server_until_db_stop(home):
    assert run(home, "db", "start").returncode == 0
    assert run(home, "ingest", str(INCIDENTS / "06-ib-link-down")).returncode == 0
    assert _server_running(home)
    assert run(home, "db", "stop").returncode == 0
    assert not _server_running(home)


@pytest.mark.slow
def test_unreachable_configured_database_is_exit_3_with_one_line(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("database:\n  url: postgresql+psycopg://nobody@127.0.0.1:1/none\n  connect_timeout: 1\n")
    r = run(tmp_path, "--config", str(cfg), "db", "upgrade")
    assert r.returncode == 3
    assert r.stderr.startswith("attribution: database:") and "Traceback" not in r.stderr


def test_world_readable_password_file_is_refused(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("hunter2")
    secret.chmod(0o644)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: postgresql+psycopg://writer@127.0.0.1:1/none\n  password_file: {secret}\n")
    r = run(tmp_path, "--config", str(cfg), "db", "status")
    assert r.returncode == 2
    assert "readable by others" in r.stderr and "hunter2" not in r.stderr + r.stdout


def test_db_upgrade_loads_the_packs_drain_policy_so_the_view_answers_from_the_start(pg_url):
    """drain_candidates evaluates the loaded policy: a database fresh from `db upgrade` has the rule pack's, not
    none until someone runs `drain plan`; one loaded later is not replaced by the next upgrade."""
    from click.testing import CliRunner
    from sqlalchemy import create_engine, text

    from attribution.cli import main
    from attribution.drain.policy import load_policy
    from attribution.rulepack.load import load_rules

    env = {"ATTRIBUTION_DATABASE_URL": pg_url}
    r = CliRunner().invoke(main, ["db", "upgrade"], env=env)
    assert r.exit_code == 0, r.output
    engine = create_engine(pg_url)
    try:
        with engine.connect() as c:
            versions = [v for (v,) in c.execute(text("SELECT version FROM attribution.drain_policies"))]
            assert versions == [load_policy(load_rules()).version]
            assert c.execute(text("SELECT count(*) FROM attribution.drain_conditions")).scalar() > 0
            assert c.execute(text("SELECT count(*) FROM attribution.drain_candidates")).scalar() == 0
            c.execute(text("INSERT INTO attribution.drain_policies (version, reason_prefix, caps, document, "
                           "loaded_at) VALUES ('operator-loaded', 'x', '{}', '{}', now() + interval '1 hour')"))
            c.commit()
        assert CliRunner().invoke(main, ["db", "upgrade"], env=env).exit_code == 0
        with engine.connect() as c:
            assert c.execute(text("SELECT version FROM attribution.drain_policies "
                                  "ORDER BY loaded_at DESC LIMIT 1")).scalar() == "operator-loaded"
    finally:
        engine.dispose()


def test_a_failed_command_leaves_no_server_running(home):
    r = run(home, "ingest", str(home / "no-such-bundle"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert not _server_running(home), "the embedded server must be stopped after a failed command"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another OS user")
def test_a_folder_the_server_user_cannot_enter_is_refused_not_chmodded(tmp_path):
    before = os.stat(tmp_path.parent.parent).st_mode  # pytest's basetemp root, 0700
    r = run(tmp_path, "db", "status")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "does not change the permissions of directories it did not create" in r.stderr
    assert os.stat(tmp_path.parent.parent).st_mode == before


def test_db_redact_counts_per_kind_dry_then_for_real_then_nothing(pg_url, tmp_path):
    """`db redact` on jobs a pack without redactions stored: `--dry-run --json` counts and changes nothing, the
    run redacts and prints its counts per kind, a second run finds nothing; `rules suggest` never showed the
    secrets, even before (it redacts the kept lines it reads)."""
    import json

    from click.testing import CliRunner
    from sqlalchemy import create_engine

    from attribution.cli import main

    from tests.harness.secrets_case import CASE, leaked, pack_without_redactions, stored_text

    env = {"ATTRIBUTION_DATABASE_URL": pg_url}
    old = str(pack_without_redactions(tmp_path))
    assert CliRunner().invoke(main, ["--rules", old, "ingest", str(CASE)], env=env).exit_code == 0
    engine = create_engine(pg_url)
    try:
        assert "s3cret" in leaked(stored_text(engine))
        r = CliRunner().invoke(main, ["rules", "suggest", "--min-jobs", "1", "--json"], env=env)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["templates"] and leaked(r.stdout) == []
        r = CliRunner().invoke(main, ["db", "redact", "--dry-run", "--json"], env=env)
        assert r.exit_code == 0, r.output
        dry = json.loads(r.stdout)
        assert dry["dry_run"] and dry["events"]["changed"] > 0 and dry["kinds"]["url_password"] > 0
        assert "s3cret" in leaked(stored_text(engine))
        r = CliRunner().invoke(main, ["db", "redact", "--batch", "5"], env=env)
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        assert lines[0].startswith(f"events: redacted {dry['events']['changed']} of ")
        assert lines[-1] == "spans: " + ", ".join(f"{k} {n}" for k, n in dry["kinds"].items())
        assert leaked(stored_text(engine)) == []
        r = CliRunner().invoke(main, ["db", "redact", "--json"], env=env)
        again = json.loads(r.stdout)
        assert again["kinds"] == {} and again["events"]["changed"] == again["verdicts"]["changed"] == 0
        assert CliRunner().invoke(main, ["db", "redact", "--batch", "0"], env=env).exit_code == 2
    finally:
        engine.dispose()


def test_db_status_json_says_where_which_revision_and_what_is_kept(store, ruleset):
    from click.testing import CliRunner

    from attribution.cli import main
    from attribution.pipeline.ingest import ingest_bundle

    ingest_bundle(ruleset, store, INCIDENTS / "03-xid94-contained-ecc")
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    r = CliRunner().invoke(main, ["db", "status", "--json"], env=env)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["revision"] == doc["newest"] == head()
    assert doc["database"].startswith("postgresql") and store.url.database in doc["database"]
    kept = doc["kept_for_replay"]
    assert kept["jobs"] == 1 and kept["lines"] > 0 and 0 < kept["stored_bytes"] and 0 < kept["raw_bytes"]
    text = CliRunner().invoke(main, ["db", "status"], env=env).output
    assert f"revision  {head()} (newest {head()})" in text and "kept for replay  1 job(s), " in text
