"""The evidence kept for replay of jobs the hooks report, not bundles: each node collector sends its filter's hits
and its error-looking lines (hooks/error-lines.patterns), the controller its job output's kept lines, the centre
keeps them per reporter and merges them per job, and `rules diff` and `reattribute` re-derive such a job as they
do a bundle's (docs/replay.md)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.config import Settings
from attribution.errors import InputError
from attribution.node import agent, hookenv
from attribution.pipeline.controller import controller_document
from attribution.pipeline.intake import decode_document, ingest_document
from attribution.replay.keep import Limits, LineKeeper, merge_piece
from attribution.serialize import evidence_from_json
from attribution.store.evidence import load_evidence

from tests.conftest import ROOT
from tests.harness.replay import UNKNOWN_LINE, pack_with_new_rule

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
END = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
G02_LINE = "thermald: sensor 7 read failed"
JOB_LINE = "[rank0] dataloader worker 3 exited: failed to fetch shard 12"
FILTER = ROOT / "hooks" / "suspicious.patterns"


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


def node_document(tmp_path: Path, node: str, line: str) -> tuple[dict, Path]:
    """What `attribution-node epilog` on `node` collects of job 601 (its kernel file holding `line`)."""
    kern = _kernel_file(tmp_path, node, line)
    doc, _ = agent.collect(hookenv.settings({}), _env(node), time.monotonic(), time.monotonic() + 60,
                           kernel_source="file", kernel_file=str(kern), fabricmanager_log="",
                           filter_file=str(FILTER))
    return json.loads(json.dumps(doc)), kern


def report_node(ruleset, tmp_path: Path, node: str, line: str, store) -> Path:
    """The node's document through the centre's intake, as the service takes it."""
    doc, kern = node_document(tmp_path, node, line)
    ingest_document(ruleset, store, decode_document(doc, "test"))
    return kern


def report_controller(ruleset, tmp_path: Path, store) -> Path:
    out = tmp_path / "slurm-601.out"
    out.write_text("[2026-03-10 08:00:00] step 0 loss 1.0\n[2026-03-10 08:01:00] step 1 loss 1.0\n"
                   f"{JOB_LINE}\n")
    info = {"JobState": "FAILED", "ExitCode": "1:0", "StdOut": str(out), "StdErr": str(out),
            "StartTime": "2026-03-10T08:00:00", "EndTime": "2026-03-10T10:00:00", "NodeList": "g[01-02]"}
    doc, why = controller_document(ruleset, Settings(home=tmp_path / "home"), _env(None), info, now=END.timestamp())
    assert why is None
    ingest_document(ruleset, store, decode_document(json.loads(json.dumps(doc)), "test"))
    return out


def _kept(store) -> dict:
    with store.begin() as c:
        ref = c.execute(text("SELECT id FROM attribution.jobs WHERE job_id = '601'")).scalar_one()
        return load_evidence(c, "601", ref)


def _lines(doc: dict) -> set:
    return {(f["piece"], f["source"], f["node"], f["file"], f.get("origin"), n, t, flags)
            for f in doc["files"] for n, t, flags in f["lines"]}


def _diff_and_reattribute(store, tmp_path: Path, g01_kernel: Path) -> None:
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
        assert loc == f"{g01_kernel}:2"
    assert json.loads(CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=env).output)["changed"] == 0


def test_the_hooks_reports_keep_the_union_of_their_lines_and_replay_them(ruleset, store, tmp_path):
    k1 = report_node(ruleset, tmp_path, "g01", UNKNOWN_LINE, store)
    k2 = report_node(ruleset, tmp_path, "g02", G02_LINE, store)
    out = report_controller(ruleset, tmp_path, store)
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
    report_node(ruleset, tmp_path, "g01", UNKNOWN_LINE, store)
    assert _lines(_kept(store)) == union
    with store.begin() as c:
        # one piece per reporter, stored apart: a report writes its own, never the job's whole evidence
        assert c.execute(text("SELECT piece, lines FROM attribution.job_evidence_pieces ORDER BY piece")).all() == \
            [("controller/controller", 1), ("node/g01", 1), ("node/g02", 1)]
        # the controller's job name stays when a node (which knows none) reports after it
        assert c.execute(text("SELECT job_name FROM attribution.jobs")).scalar_one() == "llama 70b"
    _diff_and_reattribute(store, tmp_path, k1)


def test_a_node_sends_its_error_looking_lines_alone_and_the_rest_of_its_log_stays_home(tmp_path):
    """The unknown line travels although no filter string is in it; the USB line beside it does not."""
    doc, kern = node_document(tmp_path, "g02", G02_LINE)
    [kernel] = [log for log in doc["logs"] if log["source"] == "kernel"]
    assert (kernel["origin"], kernel["lines"], kernel["cut"]) == (str(kern), 2, False)
    assert kernel["blocks"] == [[2, [f"2026-03-10 09:59:30 g02 kernel: {G02_LINE}"]]]


@pytest.mark.slow
def test_a_node_through_the_service_and_one_spooled_then_flushed_keep_their_lines(ruleset, store, pg_url,
                                                                                   tmp_path):
    """`attribution-node epilog` on g01 posts to `attribution serve`; g02's finds the service away, spools, and
    its flush sends the report once: one job, both nodes' lines kept, replayed like a bundle's."""
    import shutil

    from tests.harness.hooknode import Node
    from tests.harness.service import start_service

    svc = start_service(pg_url, tmp_path / "service")
    nodes = []
    try:
        for name, line in (("g01", UNKNOWN_LINE), ("g02", G02_LINE)):
            n = Node(tmp_path / name, svc.url, svc.tokens["report"], "601", name=name, cluster="test")
            nodes.append(n)
            shutil.copy(_kernel_file(tmp_path, name, line), n.kernel)
        g01, g02 = nodes
        g01.env = lambda env=g01.env: env() | _env("g01")
        g02.env = lambda env=g02.env: env() | _env("g02")
        _, r = g01.epilog()
        assert "stored" in r.stdout and g01.spooled() == [], r.stdout + r.stderr
        g02.write_hook_env(url="http://127.0.0.1:9")  # nothing listens on the discard port
        _, r = g02.epilog(budget=5)
        assert len(g02.spooled()) == 1, r.stdout + r.stderr
        g02.write_hook_env(url=svc.url)
        r = g02.flush()
        assert r.returncode == 0 and g02.spooled() == [], r.stdout + r.stderr
        assert g02.flush().returncode == 0  # nothing left: nothing sent twice
    finally:
        for n in nodes:
            n.close()
        svc.stop()
    assert _lines(_kept(store)) == {
        ("node/g01", "kernel", "g01", "nodes/g01/kernel.log", str(g01.kernel), 2,
         f"2026-03-10 09:59:30 g01 kernel: {UNKNOWN_LINE}", "e"),
        ("node/g02", "kernel", "g02", "nodes/g02/kernel.log", str(g02.kernel), 2,
         f"2026-03-10 09:59:30 g02 kernel: {G02_LINE}", "e")}
    _diff_and_reattribute(store, tmp_path, g01.kernel)


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


def test_a_reporters_kept_lines_are_checked_job_output_or_a_misplaced_file_from_a_node_refused():
    piece = _piece("g01", "g01", [[2, "x error", "e"]])
    assert evidence_from_json(piece, "evidence", "node")["files"][0]["lines"] == [[2, "x error", "e"]]
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
