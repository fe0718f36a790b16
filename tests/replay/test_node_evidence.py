"""The evidence kept for replay of jobs the node agents report (node/epilog.py), not bundles: each report carries
its reporter's kept lines through the report codec, the store merges them per job, and `rules diff` and
`reattribute` re-derive such a job as they do a bundle's (docs/replay.md)."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.collect.live import LiveSources
from attribution.config import Settings
from attribution.errors import InputError
from attribution.node.epilog import run_controller, run_node
from attribution.replay.keep import Limits, LineKeeper, merge_piece
from attribution.scope.slurm import parse_env
from attribution.serialize import evidence_from_json, report_from_json
from attribution.store.evidence import load_evidence

from tests.conftest import ROOT
from tests.harness.replay import UNKNOWN_LINE, pack_with_new_rule

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
END = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
G02_LINE = "thermald: sensor 7 read failed"
JOB_LINE = "[rank0] dataloader worker 3 exited: failed to fetch shard 12"


def _kernel_file(tmp_path: Path, node: str, line: str) -> Path:
    p = tmp_path / f"{node}-kern.log"
    p.write_text(f"2026-03-10 09:59:00 {node} kernel: usb 1-1: new high-speed USB device number 2\n"
                 f"2026-03-10 09:59:30 {node} kernel: {line}\n")
    return p


def _env(node: str | None, job_id: str = "601", **more) -> dict:
    env = {"SLURM_JOB_ID": job_id, "SLURM_NODELIST": "g[01-02]", "SLURM_JOB_EXIT_CODE": "256",
           "SLURM_CLUSTER_NAME": "test", "SLURM_JOB_USER": "alice", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
           "SLURM_JOB_START_TIME": str(int(START.timestamp())), "SLURM_JOB_END_TIME": str(int(END.timestamp()))}
    if node:
        env |= {"SLURMD_NODENAME": node, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}
    else:
        env |= {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_EXIT_CODE2": "1:0",
                "SLURM_JOB_NAME": "llama 70b"}  # EpilogSlurmctld only: the node epilog has no job name
    return env | more


def _db_factory(engine):
    return contextlib.contextmanager(lambda: (yield engine))


def _settings(tmp_path: Path, **over) -> Settings:
    return replace(Settings(home=tmp_path / "home"), **over)


def report_node(ruleset, tmp_path: Path, node: str, line: str, factory, settings: Settings):
    kern = _kernel_file(tmp_path, node, line)
    sources = LiveSources(kernel="file", kernel_file=str(kern), fabricmanager_log=None)
    r = run_node(ruleset, settings, parse_env(_env(node)), factory, time.monotonic() + 60, now=END,
                 sources=sources)
    assert r.stored and r.spooled is None, r.line()
    return kern


def report_controller(ruleset, tmp_path: Path, factory, settings: Settings) -> Path:
    out = tmp_path / "slurm-601.out"
    out.write_text("[2026-03-10 08:00:00] step 0 loss 1.0\n[2026-03-10 08:01:00] step 1 loss 1.0\n"
                   f"{JOB_LINE}\n")
    info = {"JobState": "FAILED", "ExitCode": "1:0", "StdOut": str(out), "StdErr": str(out),
            "StartTime": "2026-03-10T08:00:00", "EndTime": "2026-03-10T10:00:00", "NodeList": "g[01-02]"}
    r = run_controller(ruleset, settings, parse_env(_env(None)), factory, time.monotonic() + 60, info=info, now=END)
    assert r.stored, r.line()
    return out


def _kept(store) -> dict:
    with store.begin() as c:
        ref = c.execute(text("SELECT id FROM attribution.jobs WHERE job_id = '601'")).scalar_one()
        return load_evidence(c, "601", ref)


def _lines(doc: dict) -> set:
    return {(f["piece"], f["source"], f["node"], f["file"], f.get("origin"), n, t, flags)
            for f in doc["files"] for n, t, flags in f["lines"]}


def _diff_and_reattribute(store, tmp_path: Path) -> None:
    """`rules diff` with a pack knowing the unknown line lists exactly job 601, unknown -> gpu_hardware on g01;
    `reattribute` makes it so."""
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    same = CliRunner().invoke(main, ["rules", "diff", str(ROOT / "rules"), "--json"], env=env)
    assert json.loads(same.output)["changed"] == 0, same.output
    pack = pack_with_new_rule(ROOT, tmp_path / "pack")
    r = CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=env)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}]
    (job,) = out["jobs"]
    assert (job["cluster"], job["job_id"]) == ("test", "601")
    assert job["before"] == {"outcome": "unknown", "root_cause": None, "root_node": None, "culprits": []}
    assert job["after"] == {"outcome": "gpu_hardware", "root_cause": "gpu_fallen_off_bus", "root_node": "g01",
                            "culprits": ["g01"]}
    r = CliRunner().invoke(main, ["reattribute", "--rules", str(pack), "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}]
    with store.begin() as c:
        rows = c.execute(text(
            "SELECT v.outcome, v.root_kind, v.culprit_nodes, v.id = j.current_verdict_id FROM attribution.verdicts v "
            "JOIN attribution.jobs j ON j.id = v.job_ref WHERE j.job_id = '601' ORDER BY v.id")).all()
        assert [tuple(x) for x in rows][-2:] == [("unknown", None, [], False),
                                                 ("gpu_hardware", "gpu_fallen_off_bus", ["g01"], True)]
        # the new root cause is stored at the place the node read it (its kernel file, line 2)
        loc = c.execute(text(
            "SELECT e.location FROM attribution.events e JOIN attribution.verdicts v ON v.root_event_id = e.id "
            "JOIN attribution.jobs j ON v.id = j.current_verdict_id AND v.job_id = j.job_id "
            "WHERE j.job_id = '601'")).scalar_one()
        assert loc == f"{tmp_path / 'g01-kern.log'}:2"
    assert json.loads(CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=env).output)["changed"] == 0


def test_node_agents_reporting_to_the_database_keep_the_union_of_their_lines_and_replay_them(ruleset, store,
                                                                                             tmp_path):
    factory = _db_factory(store)
    settings = _settings(tmp_path)
    k1 = report_node(ruleset, tmp_path, "g01", UNKNOWN_LINE, factory, settings)
    k2 = report_node(ruleset, tmp_path, "g02", G02_LINE, factory, settings)
    out = report_controller(ruleset, tmp_path, factory, settings)
    doc = _kept(store)
    union = {("node/g01", "kernel", "g01", "nodes/g01/kernel.log", str(k1), 2,
              f"2026-03-10 09:59:30 g01 kernel: {UNKNOWN_LINE}", "e"),
             ("node/g02", "kernel", "g02", "nodes/g02/kernel.log", str(k2), 2,
              f"2026-03-10 09:59:30 g02 kernel: {G02_LINE}", "e"),
             ("controller/controller", "job", None, "job/slurm-601.out", str(out), 3, JOB_LINE, "e")}
    assert _lines(doc) == union
    assert sorted(doc["pieces"]) == ["controller/controller", "node/g01", "node/g02"]
    assert doc["truncated"] is False and doc["telemetry"] == {}
    # the same node reporting again replaces its piece: nothing doubles
    report_node(ruleset, tmp_path, "g01", UNKNOWN_LINE, factory, settings)
    assert _lines(_kept(store)) == union
    with store.begin() as c:
        assert c.execute(text("SELECT lines FROM attribution.job_evidence")).scalar_one() == 3
        # the controller's job name stays when a node (which knows none) reports after it
        assert c.execute(text("SELECT job_name FROM attribution.jobs")).scalar_one() == "llama 70b"
    _diff_and_reattribute(store, tmp_path)


@pytest.mark.slow
def test_node_agents_reporting_to_the_database_and_to_the_service_keep_the_union(ruleset, store, pg_url, tmp_path):
    """g01 writes to the database, g02 posts to `attribution serve`: one job, both nodes' lines kept."""
    from tests.harness.service import start_service

    svc = start_service(pg_url, tmp_path / "service")
    try:
        token = tmp_path / "report.token"
        token.write_text(svc.tokens["report"] + "\n")
        token.chmod(0o600)
        via_service = _settings(tmp_path, service_url=svc.url, service_token_file=str(token))

        def no_database():
            raise AssertionError("the hook opened the database although service_url is set")

        k1 = report_node(ruleset, tmp_path, "g01", UNKNOWN_LINE, _db_factory(store), _settings(tmp_path))
        k2 = report_node(ruleset, tmp_path, "g02", G02_LINE, no_database, via_service)
    finally:
        svc.stop()
    assert _lines(_kept(store)) == {
        ("node/g01", "kernel", "g01", "nodes/g01/kernel.log", str(k1), 2,
         f"2026-03-10 09:59:30 g01 kernel: {UNKNOWN_LINE}", "e"),
        ("node/g02", "kernel", "g02", "nodes/g02/kernel.log", str(k2), 2,
         f"2026-03-10 09:59:30 g02 kernel: {G02_LINE}", "e")}
    _diff_and_reattribute(store, tmp_path)


def test_a_node_keeps_as_many_lines_as_its_bound_prefilter_hits_first(ruleset, tmp_path):
    """51 error-looking lines and one Xid (a prefilter hit) at line 52, bound 10: the Xid and the first 9."""
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    data = "".join(f"worker {i}: fatal thing {i}\n" for i in range(51)) + xid + "\n"
    keeper = LineKeeper(ruleset, Limits(lines=10))
    from attribution.collect.textio import Tapped

    tapped = Tapped(__import__("io").BytesIO(data.encode()), keeper.tap("kernel", "g01", "nodes/g01/kernel.log",
                                                                        "journald"))
    while tapped.read(7):  # pieces that cut lines: numbered as the file's lines all the same
        pass
    doc = keeper.document(reporter="g01")
    (f,) = doc["files"]
    assert [ln[0] for ln in f["lines"]] == list(range(1, 10)) + [52]
    assert f["lines"][-1] == [52, xid, "p"] and f["origin"] == "journald"
    assert (doc["candidates"], doc["truncated"], doc["reporter"]) == (52, True, "g01")


def _piece(reporter: str, node: str, lines: list, telemetry=None) -> dict:
    return {"format": 1, "rules_version": "v", "truncated": False, "candidates": len(lines), "reporter": reporter,
            "files": [{"source": "kernel", "node": node, "file": f"nodes/{node}/kernel.log", "lines": lines}]} | (
        {"telemetry": telemetry} if telemetry else {})


def test_merging_a_piece_replaces_its_reporters_and_keeps_the_bound_per_job():
    a1 = _piece("g01", "g01", [[1, "a error", "e"], [2, "a Xid", "p"]], {"g01": {"epilog": {"x": 1}}})
    b = _piece("g02", "g02", [[5, "b fatal", "e"]])
    doc = merge_piece(merge_piece(None, "node/g01", a1), "node/g02", b)
    assert [(f["piece"], [ln[0] for ln in f["lines"]]) for f in doc["files"]] == [("node/g01", [1, 2]),
                                                                                 ("node/g02", [5])]
    assert doc["telemetry"] == {"g01": {"epilog": {"x": 1}}} and doc["candidates"] == 3
    a2 = _piece("g01", "g01", [[7, "a again error", "e"]])  # g01 again: its lines and snapshots replaced
    doc = merge_piece(doc, "node/g01", a2)
    assert [(f["piece"], [ln[0] for ln in f["lines"]]) for f in doc["files"]] == [("node/g02", [5]),
                                                                                 ("node/g01", [7])]
    assert doc["telemetry"] == {} and doc["candidates"] == 2 and doc["truncated"] is False
    # bound 2 lines per job: prefilter hits first, then by reporter, file and line
    c = _piece("g03", "g03", [[1, "c Xid", "p"], [2, "c error", "e"]])
    doc = merge_piece(doc, "node/g03", c, Limits(lines=2))
    assert [(f["piece"], [ln[0] for ln in f["lines"]]) for f in doc["files"]] == [("node/g01", [7]),
                                                                                 ("node/g03", [1])]
    assert doc["truncated"] is True


def test_the_codec_carries_a_nodes_piece_and_refuses_job_output_or_a_misplaced_file_from_a_node():
    piece = _piece("g01", "g01", [[2, "x error", "e"]])
    doc = {"type": "ingest", "source": "node", "context": {"cluster": "c", "job_id": "1", "nodes": ["g01"]},
           "evidence": piece}
    assert report_from_json(doc).evidence["files"][0]["lines"] == [[2, "x error", "e"]]
    job = dict(piece, files=[{"source": "job", "node": None, "file": "job/slurm-1.out", "lines": [[1, "e", "e"]]}])
    with pytest.raises(InputError, match="source 'job' is not one of kernel, fabricmanager, node"):
        evidence_from_json(job, "evidence", "node")
    assert evidence_from_json(job, "evidence", "controller")["files"][0]["file"] == "job/slurm-1.out"
    for file in ("nodes/g02/kernel.log", "job/kernel.log", "nodes/g01/../x", "/etc/passwd", "nodes/g01/a/b"):
        bad = dict(piece, files=[dict(piece["files"][0], file=file)])
        with pytest.raises(InputError, match="is not the bundle place"):
            evidence_from_json(bad, "evidence", "node")
    over = dict(piece, files=[dict(piece["files"][0], lines=[[i + 1, "x", "e"] for i in range(2001)])])
    with pytest.raises(InputError, match="over the bound of 2000 lines"):
        evidence_from_json(over, "evidence", "node")


def test_a_spooled_node_report_keeps_its_lines_when_the_spool_is_flushed(ruleset, store, tmp_path):
    from attribution.node import spool
    from attribution.node.epilog import replay

    def away():
        raise OSError("database away")

    settings = _settings(tmp_path)
    kern = _kernel_file(tmp_path, "g01", UNKNOWN_LINE)
    r = run_node(ruleset, settings, parse_env(_env("g01")), away, time.monotonic() + 60, now=END,
                 sources=LiveSources(kernel="file", kernel_file=str(kern), fabricmanager_log=None))
    assert r.spooled is not None and not r.stored
    res = spool.flush(settings.spool, lambda d: replay(ruleset, store, d))
    assert (res.replayed, res.left, res.bad) == (1, 0, [])
    assert _lines(_kept(store)) == {("node/g01", "kernel", "g01", "nodes/g01/kernel.log", str(kern), 2,
                                     f"2026-03-10 09:59:30 g01 kernel: {UNKNOWN_LINE}", "e")}
