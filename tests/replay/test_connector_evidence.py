"""The evidence kept for replay of jobs diagnosed from the live connectors (`backfill`, `diagnose --slurm-job`:
pipeline.diagnose_sacct_job; Loki streams, pod logs, local files, PromQL series), stored on a real PostgreSQL:
kept with the time and labels that decide what a line means, merged into the job's document as the piece
`sacct/connectors`, and replayed by `rules diff` and `reattribute` through the connectors' own parsers
(docs/replay.md)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.collect.loki import collect_loki
from attribution.collect.httpclient import endpoint_from
from attribution.config import ConnectorSettings, FileSourceSettings, KubernetesSettings, LokiSettings
from attribution.pipeline.ingest import ingest_diagnosis
from attribution.pipeline.live import diagnose_kueue_workload, diagnose_sacct_job, diagnose_static
from attribution.pipeline.rederive import rederive
from attribution.replay.bounds import Limits
from attribution.replay.diff import side_of_verdict
from attribution.replay.keep import LineKeeper, merge_piece
from attribution.scope.sacct import FIELDS, parse_sacct
from attribution.serialize import context_from_json
from attribution.store.evidence import load_evidence
from attribution.store.writer import JobRef, JobSession

from tests.conftest import INCIDENTS, ROOT
from tests.harness import kubectl as fake_kubectl
from tests.harness.incident_sources import bundle_streams
from tests.harness.loki import FakeLoki
from tests.harness.replay import UNKNOWN_LINE, pack_with_new_rule

UTC = timezone.utc
XID79_CASE = INCIDENTS / "01-xid79-fallen-off-bus"
KUEUE = ROOT / "tests" / "data" / "kueue" / "gpt13b-xid79"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
JOB_LINE = "[rank0] dataloader worker 3 exited: failed to fetch shard 12"
G01_KERNEL = {"filename": "/var/log/kern.log", "host": "g01", "source": "kernel"}
G01_WHERE = 'loki:{filename="/var/log/kern.log", host="g01", source="kernel"}'


def _ns(h: int, m: int, s: int) -> int:
    return int(datetime(2026, 3, 10, h, m, s, tzinfo=UTC).timestamp()) * 1_000_000_000


def sacct_job(job_id: str = "701", nodes: str = "g[01-02]"):
    """One failed job as `sacct -P` lists it (the parser backfill reads sacct with)."""
    row = {"JobIDRaw": job_id, "JobID": job_id, "JobName": "train", "User": "alice", "Partition": "gpu",
           "State": "FAILED", "ExitCode": "1:0", "DerivedExitCode": "0:0", "Start": "2026-03-10T08:00:00",
           "End": "2026-03-10T10:00:00", "NodeList": nodes, "NNodes": "2", "NTasks": "16",
           "AllocTRES": "cpu=32,gres/gpu=16,node=2", "Cluster": "test", "WorkDir": "/tmp", "Reason": "None",
           "FailedNode": ""}
    (job,) = parse_sacct("|".join(FIELDS) + "\n" + "|".join(row[f] for f in FIELDS) + "\n")
    return job


def unknown_kernel_line_in_loki(loki: FakeLoki, job_output: tuple[tuple[int, str], ...] = ()) -> None:
    """g01's kernel stream: USB noise, then the line no shipped rule knows, with no time of its own (a shipper
    that keeps only the message): its time is the entry's, 09:59:30. g02: an error-looking line; the job's
    output stream (on g01): a training step and an error-looking line."""
    loki.add_stream(G01_KERNEL, [(_ns(9, 59, 0), "usb 1-1: new high-speed USB device number 2"),
                                 (_ns(9, 59, 30), UNKNOWN_LINE)])
    loki.add_stream({"filename": "/var/log/kern.log", "host": "g02", "source": "kernel"},
                    [(_ns(9, 58, 0), "thermald: sensor 7 read failed")])
    loki.add_stream({"filename": "/home/alice/slurm-701.out", "host": "g01", "job_id": "701", "source": "job"},
                    [(_ns(9, 0, 0), "step 0 loss 1.0"), (_ns(9, 59, 40), JOB_LINE), *job_output])


def _env(store) -> dict:
    return {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}


def _diff(store, pack) -> dict:
    r = CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _kept(store, job_id: str) -> dict:
    with store.begin() as c:
        ref = c.execute(text("SELECT id FROM attribution.jobs WHERE job_id = :j"), {"j": job_id}).scalar_one()
        return load_evidence(c, job_id, ref)


def _rederived_from_kept_evidence_alone(ruleset, store, job_id: str):
    """The verdict the kept evidence gives with no stored event to fall back on, and the stored one."""
    with store.begin() as c:
        row = c.execute(text("SELECT id, cluster, job_id, start_time, context, current_verdict_id "
                             "FROM attribution.jobs WHERE job_id = :j"), {"j": job_id}).one()
        ctx = context_from_json(row.context)
        s = JobSession(c, ctx, "replay", job=JobRef(row.id, row.cluster, row.job_id, row.start_time))
        coverage = s.coverage()
        doc = load_evidence(c, job_id, row.id)
        stored = c.execute(text("SELECT outcome, root_kind, root_node, culprit_nodes FROM attribution.verdicts "
                                "WHERE job_id = :j AND id = :v"), {"j": job_id, "v": row.current_verdict_id}).one()
    return rederive(ruleset, ctx, doc, coverage, ()), tuple(stored)


def test_backfilled_job_from_loki_keeps_its_lines_and_a_pack_with_a_rule_for_its_unknown_line_changes_it(
        ruleset, store, tmp_path):
    """What `backfill` does for one job (pipeline.diagnose_sacct_job with keep, then ingest_diagnosis), Loki
    serving a kernel line no rule knows: verdict unknown; `rules diff` with a pack that knows the line lists
    exactly that job, unknown -> gpu_hardware; `reattribute` stores it at the line's Loki place and time."""
    with FakeLoki() as loki:
        unknown_kernel_line_in_loki(loki)
        d = diagnose_sacct_job(ruleset, ConnectorSettings(loki=LokiSettings(url=loki.url)), sacct_job(), keep=True)
    assert d.verdict.outcome == "unknown"
    _, verdict = ingest_diagnosis(ruleset, store, d, source="sacct")
    assert verdict.outcome == "unknown"
    doc = _kept(store, "701")
    assert sorted(doc["pieces"]) == ["sacct/connectors"] and doc["files"] == []
    assert {(s["piece"], s["reader"], s["source"], s["node"], s["location"], json.dumps(s["labels"], sort_keys=True),
             json.dumps(s["lines"])) for s in doc["streams"]} == {
        ("sacct/connectors", "loki", "kernel", "g01", G01_WHERE, json.dumps(G01_KERNEL, sort_keys=True),
         json.dumps([[2, UNKNOWN_LINE, "e", _ns(9, 59, 30)]])),
        ("sacct/connectors", "loki", "kernel", "g02",
         'loki:{filename="/var/log/kern.log", host="g02", source="kernel"}',
         json.dumps({"filename": "/var/log/kern.log", "host": "g02", "source": "kernel"}, sort_keys=True),
         json.dumps([[1, "thermald: sensor 7 read failed", "e", _ns(9, 58, 0)]])),
        ("sacct/connectors", "loki", "job", "g01",
         'loki:{filename="/home/alice/slurm-701.out", host="g01", job_id="701", source="job"}',
         json.dumps({"filename": "/home/alice/slurm-701.out", "host": "g01", "job_id": "701", "source": "job"},
                    sort_keys=True),
         json.dumps([[2, JOB_LINE, "e", _ns(9, 59, 40)]]))}

    with store.begin() as c:  # what `db status` sums: the streams' lines count
        # the backfill is one reporter of the job: its piece, stored apart (store/evidence.py)
        assert c.execute(text("SELECT piece, lines, truncated FROM attribution.job_evidence_pieces")).one() == \
            ("sacct/connectors", 3, False)
    # `rules suggest` mines them too: each line no rule matches, at its Loki place
    from attribution.pipeline.history import unmatched_lines

    assert sorted((u.job, u.source, u.location, u.text, u.unknown) for u in unmatched_lines(store, ruleset)) == [
        ("test/701", "job", 'loki:{filename="/home/alice/slurm-701.out", host="g01", job_id="701", source="job"}:2',
         JOB_LINE, True),
        ("test/701", "kernel", f"{G01_WHERE}:2", UNKNOWN_LINE, True),
        ("test/701", "kernel", 'loki:{filename="/var/log/kern.log", host="g02", source="kernel"}:1',
         "thermald: sensor 7 read failed", True)]

    assert _diff(store, ROOT / "rules")["changed"] == 0
    pack = pack_with_new_rule(ROOT, tmp_path / "pack")
    out = _diff(store, pack)
    assert out["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}] and out["examined"] == 1
    (job,) = out["jobs"]
    assert (job["cluster"], job["job_id"]) == ("test", "701")
    assert job["before"] == {"outcome": "unknown", "root_cause": None, "root_node": None, "culprits": []}
    assert job["after"] == {"outcome": "gpu_hardware", "root_cause": "gpu_fallen_off_bus", "root_node": "g01",
                            "culprits": ["g01"]}
    r = CliRunner().invoke(main, ["reattribute", "--rules", str(pack), "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}]
    with store.begin() as c:
        rows = c.execute(text(
            "SELECT v.outcome, v.root_kind, v.culprit_nodes, v.id = j.current_verdict_id FROM attribution.verdicts v "
            "JOIN attribution.jobs j ON j.id = v.job_ref WHERE j.job_id = '701' ORDER BY v.id")).all()
        assert [tuple(x) for x in rows][-2:] == [("unknown", None, [], False),
                                                 ("gpu_hardware", "gpu_fallen_off_bus", ["g01"], True)]
        # the new root cause is stored at its Loki place, at the time Loki stored the line with
        loc, at, evidence = c.execute(text(
            "SELECT e.location, e.occurred_at, e.evidence FROM attribution.events e "
            "JOIN attribution.verdicts v ON v.root_event_id = e.id "
            "JOIN attribution.jobs j ON v.id = j.current_verdict_id AND v.job_id = j.job_id "
            "WHERE j.job_id = '701'")).one()
    assert (loc, at, evidence) == (f"{G01_WHERE}:2", datetime(2026, 3, 10, 9, 59, 30, tzinfo=UTC), "system")
    assert _diff(store, pack)["changed"] == 0


def test_the_same_pack_changes_no_connector_stored_job_loki_pod_logs_and_files(ruleset, store, tmp_path):
    """Incident 01 (a GPU of hx-gpu019 fell off the bus) stored from Loki, and its Kueue twin from pod logs
    (kubectl) with the kernel logs from files: `rules diff` with the pack in use lists nothing, and each job's
    kept evidence alone, without any stored event, gives its stored verdict again."""
    with FakeLoki() as loki:
        for labels, entries in bundle_streams(XID79_CASE):
            loki.add_stream(labels, entries)
        d = diagnose_static(ruleset, ConnectorSettings(loki=LokiSettings(url=loki.url)), XID79_CASE / "context.yaml",
                            keep=True)
    assert d.verdict.outcome == "gpu_hardware"
    ingest_diagnosis(ruleset, store, d, source="context")
    exe = fake_kubectl.install(tmp_path / "bin", KUEUE)
    kernel_files = FileSourceSettings(path=str(XID79_CASE / "nodes" / "$node" / "kernel.log"), source="kernel")
    c = ConnectorSettings(files=(kernel_files,), kubernetes=KubernetesSettings(kubectl=str(exe)))
    k = diagnose_kueue_workload(ruleset, c, "ml-train/pytorchjob-gpt13b-7f3c2", "helios", keep=True)
    assert k.verdict.outcome == "gpu_hardware"
    ingest_diagnosis(ruleset, store, k, source="kueue")

    out = _diff(store, ROOT / "rules")
    assert (out["examined"], out["changed"]) == (2, 0), out
    for job_id, readers in ((d.context.job_id, {"loki"}), (k.context.job_id, {"text"})):
        doc = _kept(store, job_id)
        assert {s["reader"] for s in doc["streams"]} == readers and doc["files"] == []
        again, stored = _rederived_from_kept_evidence_alone(ruleset, store, job_id)
        side = side_of_verdict(again.verdict)
        assert (side.outcome, side.root, side.root_node, list(side.culprits)) == stored
        assert stored[:3] == ("gpu_hardware", "gpu_fallen_off_bus", "hx-gpu019")
    locations = {s["location"] for s in _kept(store, k.context.job_id)["streams"]}
    assert str(XID79_CASE / "nodes" / "hx-gpu019" / "kernel.log") in locations  # the files connector's
    assert "pod/gpt13b-worker-2/pytorch/previous" in locations  # kubectl logs --previous


def test_a_connector_stream_is_bounded_per_job_prefilter_hits_first_each_line_with_its_time(ruleset):
    """51 error-looking entries then an Xid (a prefilter hit) in one Loki stream, bound 10 lines: the Xid and
    the first 9, each with the nanosecond time Loki stored it with."""
    entries = [(_ns(9, 0, 0) + i, f"worker {i}: fatal thing {i}") for i in range(51)] + [(_ns(9, 30, 0), XID79)]
    ctx = context_from_json({"cluster": "test", "job_id": "702", "nodes": ["g01"], "state": "FAILED",
                             "start": "2026-03-10T08:00:00Z", "end": "2026-03-10T10:00:00Z"})
    keeper = LineKeeper(ruleset, Limits(lines=10))
    with FakeLoki() as loki:
        loki.add_stream(G01_KERNEL, entries)
        settings = LokiSettings(url=loki.url, sources=("kernel",), limit=20)  # three pages
        obs, cov = collect_loki(endpoint_from(settings, "loki"), settings, ctx, ruleset.prefilter,
                                datetime(2026, 3, 10, 8, tzinfo=UTC), datetime(2026, 3, 10, 10, tzinfo=UTC),
                                time.monotonic() + 30, keeper=keeper)
    assert [c.status for c in cov] == ["ok"]
    doc = keeper.document(reporter="connectors")
    (s,) = doc["streams"]
    assert s["lines"] == [[i + 1, f"worker {i}: fatal thing {i}", "e", _ns(9, 0, 0) + i] for i in range(9)] + [
        [52, XID79, "p", _ns(9, 30, 0)]]
    assert (doc["candidates"], doc["truncated"]) == (52, True)
    # merged with a node agent's piece of the same job, the bound holds for the job: the prefilter hits (g01's
    # line 4, the stream's 52), then the error-looking lines by reporter (node/g01 before sacct/connectors)
    node_piece = {"format": 1, "rules_version": "v", "truncated": False, "candidates": 2, "reporter": "g01",
                  "files": [{"source": "kernel", "node": "g01", "file": "nodes/g01/kernel.log",
                             "origin": "journald", "lines": [[3, "an error", "e"], [4, XID79, "p"]]}]}
    merged = merge_piece(merge_piece(None, "node/g01", node_piece), "sacct/connectors", doc, Limits(lines=3))
    assert [(f["piece"], [ln[0] for ln in f["lines"]]) for f in merged["files"]] == [("node/g01", [3, 4])]
    assert [(f["piece"], [ln[0] for ln in f["lines"]]) for f in merged["streams"]] == [("sacct/connectors", [52])]
    assert merged["truncated"] is True and sorted(merged["pieces"]) == ["node/g01", "sacct/connectors"]
    # the connectors reporting again replace their piece; the node's stays
    again = merge_piece(merged, "sacct/connectors", dict(doc, streams=[dict(s, lines=[[52, XID79, "p", 7]])]))
    assert [ln for f in again["streams"] for ln in f["lines"]] == [[52, XID79, "p", 7]]
    assert [ln[0] for f in again["files"] for ln in f["lines"]] == [3, 4]


def test_a_job_output_stream_stays_user_written_when_replayed(ruleset, store):
    """The job's own output (a Loki `job` stream) prints srun's node-failure line for g01: the user's program
    could have printed it, so g01 is a culprit on `job_output` evidence only (confidence at most medium, no
    drain); replayed from the kept stream alone it is still job output (source `job`), never a system culprit."""
    srun = "srun: error: Node failure on g01"
    mallory = f"Mar 10 09:59:55 g01 mallory[4242]: {XID79}"  # syslog, not the kernel's tag: not a kernel message
    syslog = {"filename": "/var/log/syslog", "host": "g01", "source": "kernel"}
    with FakeLoki() as loki:
        unknown_kernel_line_in_loki(loki, job_output=((_ns(9, 59, 50), srun),))
        loki.add_stream(syslog, [(_ns(9, 59, 55), mallory)])
        d = diagnose_sacct_job(ruleset, ConnectorSettings(loki=LokiSettings(url=loki.url)), sacct_job(), keep=True)
    _, verdict = ingest_diagnosis(ruleset, store, d, source="sacct")
    assert (verdict.outcome, verdict.root_cause.kind, verdict.culprits, verdict.confidence) == (
        "host", "node_fail", (("g01", None),), "medium")
    assert verdict.evidence_of_culprit(0) == "job_output"
    (job,) = [s for s in _kept(store, "701")["streams"] if s["source"] == "job"]
    assert job["lines"][-1] == [3, srun, "pe", _ns(9, 59, 50)] and job["node"] == "g01"
    (other,) = [s for s in _kept(store, "701")["streams"] if s["labels"] == syslog]
    assert other["lines"] == [[1, mallory, "p", _ns(9, 59, 55)]]
    again, stored = _rederived_from_kept_evidence_alone(ruleset, store, "701")
    assert stored == ("host", "node_fail", "g01", ["g01"])
    v = again.verdict
    assert (v.outcome, v.root_cause.kind, v.root_cause.source, v.culprits, v.confidence) == (
        "host", "node_fail", "job", (("g01", None),), "medium")
    assert v.evidence_of_culprit(0) == "job_output"
    assert not [e for e in again.events if e.kind == "gpu_fallen_off_bus"]  # mallory's line gives no event again
    assert _diff(store, ROOT / "rules")["changed"] == 0


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """A real Prometheus with incident 01's DCGM history: hx-gpu019's GPU 4 shows Xid 79 from 09:14:44, GPU 2 of
    hx-gpu017 an Xid 48 stuck from before the window (30 s scrapes)."""
    from tests.harness.incident_sources import dcgm_history
    from tests.harness.prometheus import PrometheusServer, openmetrics

    nodes = ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")
    history = dcgm_history(nodes, datetime(2026, 3, 10, 7, 30, tzinfo=UTC), datetime(2026, 3, 10, 9, 45, tzinfo=UTC),
                           xid_at={("hx-gpu019", 4): (datetime(2026, 3, 10, 9, 14, 44, tzinfo=UTC), 79)},
                           stuck={("hx-gpu017", 2): 48})
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), openmetrics(history))
    server.install()
    server.start()
    yield server
    server.stop()


def _pack_without_metric_rule(dest, rule_id: str):
    import shutil

    import yaml

    shutil.copytree(ROOT / "rules", dest)
    doc = yaml.safe_load((dest / "metrics.yaml").read_text())
    doc["rules"] = [r for r in doc["rules"] if r["id"] != rule_id]
    (dest / "metrics.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return dest


@pytest.mark.prometheus
def test_promql_series_are_kept_as_their_changes_and_the_metric_rules_replay_on_them(ruleset, store, prom, tmp_path):
    """Incident 01's job output (files) and its DCGM series (Prometheus), the Xid only in the series: the series
    are kept per node as the samples where a value changes; the pack in use changes nothing, a pack without the
    DCGM Xid rule turns the job gpu_hardware -> unknown (the metric events are replayed, not taken as stored)."""
    from attribution.config import PrometheusSettings

    job_files = FileSourceSettings(path=str(XID79_CASE / "job" / "*.out"), source="job")
    c = ConnectorSettings(files=(job_files,), prometheus=PrometheusSettings(url=prom.url, step=15))
    d = diagnose_static(ruleset, c, XID79_CASE / "context.yaml", keep=True)
    root = d.verdict.root_cause
    assert (d.verdict.outcome, root.source, root.node) == ("gpu_hardware", "metrics", "hx-gpu019")
    ingest_diagnosis(ruleset, store, d, source="context")
    doc = _kept(store, d.context.job_id)
    kept = doc["metrics"]["nodes"]
    assert sorted(kept) == ["hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020"] and "metrics_truncated" not in doc
    xid = {(n, s["labels"]["gpu"]): s["samples"] for n, series in kept.items() for s in series
           if s["name"] == "DCGM_FI_DEV_XID_ERRORS"}
    assert len(xid) == 32
    first = xid[("hx-gpu020", "0")][0][0]
    assert xid[("hx-gpu020", "0")] == [[first, 0.0]]  # 0 all along: one sample
    assert xid[("hx-gpu017", "2")] == [[first, 48.0]]  # stuck: one sample
    assert xid[("hx-gpu019", "4")] == [[first, 0.0], [root.time.timestamp(), 79.0]]
    assert {s["reader"] for s in doc["streams"]} == {"text"}  # the job output, read by the files connector

    assert _diff(store, ROOT / "rules")["changed"] == 0
    again, stored = _rederived_from_kept_evidence_alone(ruleset, store, d.context.job_id)
    side = side_of_verdict(again.verdict)
    assert (side.outcome, side.root, side.root_node, list(side.culprits)) == stored
    out = _diff(store, _pack_without_metric_rule(tmp_path / "pack", "metrics.dcgm_xid"))
    assert out["totals"] == [{"transition": "gpu_hardware -> unknown", "jobs": 1}], out
