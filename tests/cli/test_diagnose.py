"""The command line: the documented commands, exit codes, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import INCIDENTS


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "attribution.cli", *args], capture_output=True, text=True, **kw)


def test_diagnose_json_follows_the_verdict_contract():
    r = run("diagnose", str(INCIDENTS / "01-xid79-fallen-off-bus"), "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["schema"] == "attribution.verdict/1"
    for key in ("job", "outcome", "confidence", "action", "root_cause", "culprits", "symptoms", "explanation",
                "coverage", "rules_version"):
        assert key in v
    assert set(v["job"]) >= {"cluster", "job_id", "state", "exit_code", "start", "end", "nodes"}
    rc = v["root_cause"]
    assert set(rc) >= {"kind", "code", "node", "gpu", "time", "source", "rule", "location", "line"}
    assert rc["location"].startswith("nodes/hx-gpu019/kernel.log:")
    assert rc["time"] == "2026-03-10T09:14:37Z"
    assert v["culprits"] == [{"node": "hx-gpu019", "gpu": "0000:9d:00", "evidence": "system"}]
    assert all({"kind", "node", "time", "location", "explained_by"} <= set(s) for s in v["symptoms"])
    assert {"source", "node", "status", "lines"} <= set(v["coverage"][0])


def test_diagnose_text_summary():
    r = run("diagnose", str(INCIDENTS / "06-ib-link-down"))
    assert r.returncode == 0
    assert "outcome     network" in r.stdout and "pel-gpu-0103" in r.stdout and "coverage gaps" in r.stdout


def test_max_symptoms_limits_the_list_but_not_the_count():
    v = json.loads(run("diagnose", str(INCIDENTS / "02-xid48-dbe-ecc-xid31"), "--json", "--max-symptoms", "3").stdout)
    assert len(v["symptoms"]) == 3 and v["symptoms_total"] > 3


def _file(d):
    (d / "file").write_text("x")
    return d / "file"


def _bundle_with(text):
    def make(d):
        (d / "b").mkdir()
        if text is not None:
            (d / "b" / "context.yaml").write_text(text)
        return d / "b"
    return make


@pytest.mark.parametrize("setup,needle", [
    (lambda d: d / "absent", "no such bundle"),
    (_file, "not a bundle: a folder with context.yaml, or a .tar.gz or .tgz archive of one"),
    (_bundle_with(None), "context.yaml: no such file"),
    (_bundle_with("cluster: [x\n"), "malformed YAML"),
    (_bundle_with("cluster: x\nnodes: a\n"), "missing required field 'job_id'"),
])
def test_bad_input_gives_one_line_and_exit_2(tmp_path, setup, needle):
    path = setup(tmp_path)
    r = run("diagnose", str(path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(path) in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_bundle_as_a_tar_gz_archive_gets_the_verdict_of_its_folder(tmp_path):
    """#32: ingest and POST /v1/diagnose took a .tar.gz bundle, diagnose refused it."""
    import tarfile

    folder = INCIDENTS / "05-nvswitch-fatal-sxid"
    archive = tmp_path / "05.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="05-nvswitch-fatal-sxid")
    from_folder = run("diagnose", str(folder), "--json")
    from_archive = run("diagnose", str(archive), "--json")
    assert from_archive.returncode == 0, from_archive.stderr
    assert json.loads(from_archive.stdout) == json.loads(from_folder.stdout)


def test_a_broken_archive_is_one_line_naming_it(tmp_path):
    archive = tmp_path / "cut.tgz"
    archive.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 60)
    r = run("diagnose", str(archive))
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"attribution: {archive}: not a readable tar.gz archive: ")
    assert "attribution-bundle-" not in r.stderr


def test_a_broken_rule_pack_is_bad_input_for_diagnose(tmp_path):
    (tmp_path / "x.yaml").write_text("type: rules\n")
    r = run("--rules", str(tmp_path), "diagnose", str(INCIDENTS / "01-xid79-fallen-off-bus"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{tmp_path}/x.yaml:1:" in r.stderr
