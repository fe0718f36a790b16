"""`attribution ingest` over many kinds of argument, and `attribution demo` run twice (nothing new the second
time), on a real PostgreSQL."""

from __future__ import annotations

import json
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


def _broken_bundle(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "context.yaml").write_text("cluster: [unclosed\n")
    return bad


def test_keep_going_goes_past_a_bad_bundle_and_exits_2_at_the_end(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    bad = _broken_bundle(tmp_path)
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


def _archive(path, bundle, arcname=None):
    with tarfile.open(path, "w:gz") as tar:
        tar.add(bundle, arcname=arcname or bundle.name)
    return path


def test_a_folder_of_archives_and_bundle_folders_is_every_one_of_them(store, tmp_path):
    """#32: `ingest DIR` took the bundle folders of DIR and left its archives out."""
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    shutil.copytree(INCIDENTS / "04-xid74-nvlink", tmp_path / "04-xid74-nvlink")
    _archive(tmp_path / "06.tar.gz", INCIDENTS / "06-ib-link-down")
    _archive(tmp_path / "07.tgz", INCIDENTS / "07-app-python-keyerror")
    (tmp_path / "README").write_text("neither\n")
    r = CliRunner().invoke(main, ["ingest", str(tmp_path)], env=env)
    assert r.exit_code == 0, r.output
    assert "ingested 3 bundle(s)" in r.output and "note:" not in r.output
    assert f"{tmp_path / '06.tar.gz'}: network" in r.output and f"{tmp_path / '07.tgz'}: application" in r.output
    assert _counts(store)[0] == 3


def test_a_broken_archive_is_named_by_itself_and_its_member_never_by_a_temporary_folder(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    noise = tmp_path / "noise.tar.gz"
    noise.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    whole = _archive(tmp_path / "whole.tar.gz", INCIDENTS / "03-xid94-contained-ecc")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[:2000])
    bad = tmp_path / "b"
    shutil.copytree(INCIDENTS / "03-xid94-contained-ecc", bad)
    (bad / "context.yaml").write_text("cluster: [unclosed\n")
    badctx = _archive(tmp_path / "badctx.tar.gz", bad)
    for archive, said in ((noise, "not a readable tar.gz archive"), (cut, "not a readable tar.gz archive"),
                          (badctx, "b/context.yaml:2: malformed YAML")):
        r = CliRunner().invoke(main, ["ingest", str(archive)], env=env)
        assert r.exit_code == 2, r.output
        assert r.output.startswith(f"attribution: {archive}: ") and said in r.output, r.output
        assert "attribution-bundle-" not in r.output and "bundle.tar.gz" not in r.output
        assert len(r.output.splitlines()) == 1
    assert _counts(store)[0] == 0


def test_ingest_json_lists_each_bundle_the_skipped_and_the_failed_with_totals(store, tmp_path):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    bad = _broken_bundle(tmp_path)
    stray = tmp_path / "notes.txt"
    stray.write_text("x\n")
    good = INCIDENTS / "06-ib-link-down"
    r = CliRunner().invoke(main, ["ingest", "--json", "--keep-going", str(good), str(bad),
                                                  str(stray)], env=env)
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    (row,) = doc["bundles"]
    assert row["bundle"] == str(good) and row["outcome"] == "network" and row["verdict_changed"] is True
    assert row["cluster"] and row["job_id"] and row["new_events"] > 0
    assert doc["skipped"] == [str(stray)]
    assert [f["bundle"] for f in doc["failed"]] == [str(bad)] and "context.yaml" in doc["failed"][0]["problem"]
    assert doc["totals"] == {"stored": 1, "new_events": row["new_events"], "new_verdicts": 1, "skipped": 1,
                             "failed": 1}
    again = CliRunner().invoke(main, ["ingest", "--json", str(good)], env=env)
    assert json.loads(again.stdout)["totals"] == {"stored": 1, "new_events": 0, "new_verdicts": 0, "skipped": 0,
                                                  "failed": 0}
