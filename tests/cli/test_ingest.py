"""`attribution ingest` over many kinds of argument, and `attribution demo` run twice (nothing new the second
time), on a real PostgreSQL."""

from __future__ import annotations

import shutil
import tarfile

from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main

from tests.conftest import INCIDENTS


def _counts(engine) -> tuple[int, int, int]:
    with engine.connect() as c:
        return tuple(c.execute(text(f"SELECT count(*) FROM attribution.{t}")).scalar()
                     for t in ("jobs", "events", "verdicts"))


def test_ingest_takes_folders_archives_and_folders_of_bundles_and_skips_the_rest(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    many = tmp_path / "many"
    many.mkdir()
    for name in ("04-xid74-nvlink", "06-ib-link-down"):
        shutil.copytree(INCIDENTS / name, many / name)
    archive = tmp_path / "one.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(INCIDENTS / "07-app-python-keyerror", arcname="07-app-python-keyerror")
    stray = tmp_path / "notes.txt"
    stray.write_text("not a bundle\n")
    r = CliRunner().invoke(main, ["ingest", str(INCIDENTS / "01-xid79-fallen-off-bus"), str(many), str(archive),
                                  str(stray)], env=env)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "note: " in out and "notes.txt: skipped, not a bundle" in out
    assert "[1/4]" in out and "[4/4]" in out
    assert "ingested 4 bundle(s):" in out and "skipped 1" in out
    assert "one.tar.gz: application" in out
    assert _counts(store)[0] == 4
    again = CliRunner().invoke(main, ["ingest", str(many)], env=env)
    assert "0 new event(s), 0 new verdict(s)" in again.output


def test_keep_going_goes_past_a_bad_bundle_and_exits_2_at_the_end(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "context.yaml").write_text("cluster: [unclosed\n")
    good = INCIDENTS / "06-ib-link-down"
    r = CliRunner().invoke(main, ["ingest", str(bad), str(good)], env=env)
    assert r.exit_code == 2 and _counts(store)[0] == 0  # without --keep-going it stops at the first
    r = CliRunner().invoke(main, ["ingest", "--keep-going", str(bad), str(good)], env=env)
    assert r.exit_code == 2
    problems = [line for line in r.output.splitlines() if line.startswith("attribution: ")]
    assert len(problems) == 1 and "context.yaml" in problems[0]
    assert "ingested 1 bundle(s)" in r.output and "1 failed" in r.output
    assert _counts(store)[0] == 1


def test_a_missing_path_is_bad_input_in_one_line(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    r = CliRunner().invoke(main, ["ingest", str(tmp_path / "nope")], env=env)
    assert r.exit_code == 2 and r.output.strip().endswith("nope: no such file or directory")


def test_demo_twice_stores_nothing_new_and_fresh_refuses_a_configured_database(store):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    first = CliRunner().invoke(main, ["demo", "--weeks", "1"], env=env)
    assert first.exit_code == 0, first.output
    before = _counts(store)
    second = CliRunner().invoke(main, ["demo", "--weeks", "1"], env=env)
    assert second.exit_code == 0, second.output
    assert "already stored" in second.output
    assert _counts(store) == before
    r = CliRunner().invoke(main, ["demo", "--fresh"], env=env)
    assert r.exit_code == 2 and "refusing to empty a configured database" in r.output
    assert _counts(store) == before
