"""The evidence kept for replay, `rules diff` and `reattribute` (docs/replay.md), on a real PostgreSQL."""

from __future__ import annotations

import json
import zlib

from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.drain.policy import load_policy
from attribution.pipeline.ingest import ingest_bundle
from attribution.store import drain as sd
from attribution.replay.bounds import Limits
from attribution.replay.keep import flagged_lines, keep_bundle
from attribution.rulepack.load import Prefilter
from attribution.scope.bundle import load_context
from attribution.store.evidence import decode, evidence_size

from tests.conftest import CASES, INCIDENTS, ROOT
from tests.harness.logs import write_context
from tests.harness.replay import UNKNOWN_LINE, failed_job_bundle, pack_with_new_rule

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def _env(store):
    return {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}


def test_flagged_lines_numbers_every_line_either_filter_selects():
    data = b"ok\nan error here\nfine\nNVRM: Xid 79\nNVRM: Xid error\n"
    got = flagged_lines(data, Prefilter([r"NVRM: Xid"]), Prefilter([r"(?i:\berror\b)"]))
    assert [(n, data[s:e].decode(), f) for n, s, e, f in got] == [
        (2, "an error here", "e"), (4, "NVRM: Xid 79", "p"), (5, "NVRM: Xid error", "pe")]


def test_kept_evidence_is_bounded_prefilter_lines_first(ruleset, tmp_path):
    lines = [f"worker {i}: fatal thing {i}" for i in range(50)] + [XID79]
    b = failed_job_bundle(tmp_path / "b", "7", "g01", lines)
    doc = keep_bundle(b, load_context(b / "context.yaml"), ruleset, Limits(lines=10))
    kept = [ln for f in doc["files"] for ln in f["lines"]]
    assert len(kept) == 10 and doc["truncated"] and doc["candidates"] == 51
    assert [ln[1].endswith(XID79) for ln in kept].count(True) == 1  # the Xid line (a prefilter hit) is kept
    assert kept[0][0] == 2 and kept[-1][0] == 52  # line 1 is the USB noise; the Xid is line 52 of the file


def test_ingest_keeps_flagged_and_error_looking_lines_compressed_and_deletes_them_with_the_job(ruleset, store,
                                                                                              tmp_path):
    b = failed_job_bundle(tmp_path / "b", "101", "g01", [UNKNOWN_LINE, XID79],
                          job_lines=("Traceback (most recent call last):", "ValueError: bad shape"))
    result, verdict = ingest_bundle(ruleset, store, b)
    with store.begin() as c:
        row = c.execute(text("SELECT lines, raw_bytes, truncated, document FROM attribution.job_evidence "
                             "WHERE job_ref = :j"), {"j": result.job.id}).one()
        doc = decode(row.document)
        assert json.loads(zlib.decompress(row.document)) == doc
        got = {(f["file"], n, flags) for f in doc["files"] for n, _, flags in f["lines"]}
        assert got == {("nodes/g01/kernel.log", 2, "e"), ("nodes/g01/kernel.log", 3, "p"),
                       ("job/slurm-101.out", 4, "e"), ("job/slurm-101.out", 5, "p")}
        assert row.lines == 4 and not row.truncated
        assert doc["telemetry"] == {}  # the bundle has no snapshots
        assert evidence_size(c)["jobs"] == 1
        c.execute(text("DELETE FROM attribution.jobs WHERE id = :j"), {"j": result.job.id})
        assert evidence_size(c) == {"jobs": 0, "lines": 0, "raw_bytes": 0, "stored_bytes": 0}


CASE19 = CASES / "19-ecc-counters-grew-nccl-errors-only"


def test_the_counter_snapshots_are_kept_parsed_and_a_pack_replays_its_counter_rules_on_them(ruleset, store,
                                                                                            tmp_path):
    """Case 19's fault shows only in the counters (dram_uncorrectable 0 -> 2 on ash-h100-02's GPU 0000:61:00):
    a pack whose counter rules want an increase of 5 re-derives, from the kept snapshots, what the case's notes
    say the verdict is without them: the NET/IB hint, network, no culprit."""
    import shutil

    import yaml

    result, verdict = ingest_bundle(ruleset, store, CASE19)
    assert verdict.outcome == "gpu_hardware"
    with store.begin() as c:
        doc = decode(c.execute(text("SELECT document FROM attribution.job_evidence WHERE job_ref = :j"),
                               {"j": result.job.id}).scalar_one())
    assert sorted(doc["telemetry"]) == ["ash-h100-01", "ash-h100-02"] and "telemetry_truncated" not in doc
    assert all(sorted(p) == ["epilog", "prolog"] for p in doc["telemetry"].values())
    gpu = {p: doc["telemetry"]["ash-h100-02"][p]["gpus"]["0000:61:00"] for p in ("prolog", "epilog")}
    assert (gpu["prolog"]["ecc.volatile.dram_uncorrectable"], gpu["epilog"]["ecc.volatile.dram_uncorrectable"]) == (
        0.0, 2.0)

    pack = tmp_path / "pack"
    shutil.copytree(ROOT / "rules", pack)
    counters = yaml.safe_load((pack / "counters.yaml").read_text())
    for r in counters["rules"]:
        if r["id"] in ("counters.gpu_uncorrectable_ecc", "counters.gpu_remapped_rows_uncorrectable"):
            r["min_increase"] = 5
    (pack / "counters.yaml").write_text(yaml.safe_dump(counters, sort_keys=False, width=1000))
    r = CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["totals"] == [{"transition": "gpu_hardware -> network", "jobs": 1}]
    (job,) = out["jobs"]
    assert job["before"] == {"outcome": "gpu_hardware", "root_cause": "gpu_ecc_counter", "root_node": "ash-h100-02",
                             "culprits": ["ash-h100-02"]}
    assert (job["after"]["outcome"], job["after"]["culprits"]) == ("network", [])
    assert json.loads(CliRunner().invoke(main, ["rules", "diff", str(ROOT / "rules"), "--json"],
                                         env=_env(store)).output)["changed"] == 0


def test_kept_snapshots_are_bounded_per_job(tmp_path):
    from attribution.collect.telemetry import collect_bundle_telemetry
    from attribution.replay.keep import keep_telemetry, kept_telemetry

    snaps, _ = collect_bundle_telemetry(CASE19, ("ash-h100-01", "ash-h100-02"))
    whole = keep_telemetry(snaps)
    size = len(json.dumps(whole["telemetry"]["ash-h100-01"], separators=(",", ":")))
    one = keep_telemetry(snaps, Limits(telemetry_bytes=size))
    assert sorted(one["telemetry"]) == ["ash-h100-01"] and one["telemetry_truncated"] is True
    assert kept_telemetry(whole) == snaps  # the parsed snapshots come back as they were collected


def test_a_completed_job_keeps_no_evidence(ruleset, store, tmp_path):
    b = failed_job_bundle(tmp_path / "ok", "5", "g01", [], state="COMPLETED", exit_code="0:0")
    ingest_bundle(ruleset, store, b)
    with store.begin() as c:
        assert evidence_size(c)["jobs"] == 0


def test_rules_diff_lists_exactly_the_job_a_new_rule_changes_and_reattribute_applies_it(ruleset, store,
                                                                                          tmp_path):
    """Done-when of issue 20: the unknown job becomes gpu_hardware; the other stored failures do not move."""
    unknown = failed_job_bundle(tmp_path / "u", "101", "g01", [UNKNOWN_LINE])
    known = failed_job_bundle(tmp_path / "k", "102", "g02", [XID79])
    other_unknown = failed_job_bundle(tmp_path / "o", "103", "g03", ["NVRM: GPU at PCI:0000:3b:00: error code 3"])
    for b in (unknown, known, other_unknown, INCIDENTS / "01-xid79-fallen-off-bus"):
        ingest_bundle(ruleset, store, b)
    pack = pack_with_new_rule(ROOT, tmp_path / "pack")
    env = _env(store)

    same = CliRunner().invoke(main, ["rules", "diff", str(ROOT / "rules"), "--json"], env=env)
    assert same.exit_code == 0, same.output
    assert json.loads(same.output) == {"examined": 4, "changed": 0, "totals": [], "jobs": []}

    r = CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=env)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["examined"] == 4 and out["changed"] == 1
    assert out["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}]
    (job,) = out["jobs"]
    assert (job["cluster"], job["job_id"]) == ("test", "101")
    assert job["before"] == {"outcome": "unknown", "root_cause": None, "root_node": None, "culprits": []}
    assert job["after"] == {"outcome": "gpu_hardware", "root_cause": "gpu_fallen_off_bus", "root_node": "g01",
                            "culprits": ["g01"]}
    txt = CliRunner().invoke(main, ["rules", "diff", str(pack)], env=env)
    assert txt.output.splitlines()[-2:] == ["unknown -> gpu_hardware: 1",
                                            "1 of 4 failed job(s) with kept evidence would change"]
    assert "test/101: unknown  ->  gpu_hardware root gpu_fallen_off_bus@g01 culprits g01" in txt.output

    with store.begin() as c:
        before = c.execute(text("SELECT count(*) FROM attribution.verdicts")).scalar_one()
    r = CliRunner().invoke(main, ["reattribute", "--rules", str(pack), "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}]
    with store.begin() as c:
        rows = c.execute(text(
            "SELECT v.outcome, v.root_kind, v.culprit_nodes, v.rules_version, v.id = j.current_verdict_id "
            "FROM attribution.verdicts v JOIN attribution.jobs j ON j.id = v.job_ref WHERE j.job_id = '101' "
            "ORDER BY v.id")).all()
        assert [tuple(r[:3]) + (r[4],) for r in rows] == [("unknown", None, [], False),
                                                          ("gpu_hardware", "gpu_fallen_off_bus", ["g01"], True)]
        assert rows[0].rules_version == ruleset.version and rows[1].rules_version != ruleset.version
        assert c.execute(text("SELECT count(*) FROM attribution.verdicts")).scalar_one() == before + 1
        # the root cause is a stored event linked to the job, counted in the failed-roots rollup
        assert c.execute(text("SELECT count(*) FROM attribution.verdicts v JOIN attribution.jobs j "
                              "ON v.id = j.current_verdict_id WHERE j.job_id = '101' "
                              "AND v.root_event_id IS NOT NULL")).scalar_one() == 1
        assert c.execute(text("SELECT jobs FROM attribution.failed_roots WHERE node = 'g01'")).scalar_one() == 1
    again = CliRunner().invoke(main, ["rules", "diff", str(pack), "--json"], env=env)
    assert json.loads(again.output)["changed"] == 0


RECURRING = "NVRM: GPU{g} thermal interlock tripped at {t} C, throttling failed"
SECOND = "trainer: fatal: shard {s} checksum mismatch in /data/shard-{s}.bin"


def _noise(rng) -> str:
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(5, 9)))
             for _ in range(rng.randint(2, 7))]
    return f"{words[0]} {rng.choice(['error', 'failed', 'fatal', 'exception'])} {' '.join(words[1:])}"


def test_rules_suggest_finds_the_two_recurring_unmatched_messages_in_order(ruleset, store, tmp_path):
    """Done-when of issue 13 part 3: one message in 30 jobs, a second in 3, noise in 7: exactly two templates,
    the first first; their skeletons pass `rules check` once the kind is named."""
    import random

    import yaml

    rng = random.Random(13)
    for i in range(40):
        kernel, job = [], []
        if i < 30:
            kernel.append(RECURRING.format(g=i % 8, t=90 + i % 9))
        elif i < 33:
            job.append(SECOND.format(s=100 + i))
        else:
            kernel.append(_noise(rng))
            job.append(_noise(rng))
        ingest_bundle(ruleset, store, failed_job_bundle(tmp_path / f"j{i}", str(500 + i), f"g{i:02d}", kernel,
                                                        job_lines=tuple(job)))
    r = CliRunner().invoke(main, ["rules", "suggest", "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    first, second = out["templates"]
    assert (first["source"], first["jobs"], first["unknown_jobs"], first["failed_gpu_hours"]) == ("kernel", 30, 30,
                                                                                                  480.0)
    assert (second["source"], second["jobs"], second["failed_gpu_hours"]) == ("job", 3, 48.0)
    assert first["template"] == "NVRM: <*> thermal interlock tripped at <*> C, throttling failed"
    assert second["template"] == "trainer: fatal: shard <*> checksum mismatch in <*>"
    assert len(first["examples"]) == 3 and all("thermal interlock" in e["line"] for e in first["examples"])
    # no other kept line shares half of either template's words: each near-miss is its first example with the
    # last literal word changed
    assert (first["near_miss_from_fleet"], second["near_miss_from_fleet"]) == (False, False)
    assert first["near_miss"] == first["examples"][0]["line"].replace("throttling failed", "throttling ok")
    assert second["near_miss"] == second["examples"][0]["line"].replace("mismatch in", "mismatch ok")

    pack = tmp_path / "pack"
    import shutil

    shutil.copytree(ROOT / "rules", pack)
    for n, t in enumerate((first, second)):
        assert "kind: TODO" in t["skeleton"]
        doc = yaml.safe_load(t["skeleton"].replace("kind: TODO", "kind: gpu_fallen_off_bus"))
        (pack / f"suggested-{n}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    check = CliRunner().invoke(main, ["rules", "check", str(pack)])
    assert check.exit_code == 0, check.output
    (pack / "bad.yaml").write_text(first["skeleton"])  # the kind left to fill in: refused
    assert CliRunner().invoke(main, ["rules", "check", str(pack)]).exit_code != 0

    txt = CliRunner().invoke(main, ["rules", "suggest"], env=_env(store)).output
    heads = [ln for ln in txt.splitlines() if ln.startswith("# ") and ". [" in ln]
    assert heads == ["# 1. [kernel] NVRM: <*> thermal interlock tripped at <*> C, throttling failed",
                     "# 2. [job] trainer: fatal: shard <*> checksum mismatch in <*>"]


def test_reattribute_keeps_the_trust_marks_of_job_output_evidence(ruleset, store, tmp_path):
    """Issue 18 meets issue 20: a job whose output claims a node failure on g02 while g01's kernel logged a fault
    only the new pack knows. Before: the culprit g02 rests on job output. After reattribute: the new verdict's
    root culprit g01 rests on system-written evidence, g02 still on job output, the job-output event stays marked
    job_output, and the drain plan never names g02."""
    b = failed_job_bundle(tmp_path / "t", "301", "g01", [UNKNOWN_LINE],
                          job_lines=("srun: error: Node failure on g02",))
    write_context(b, job_id="301", nodes="g[01-02]", gpus_per_node=8)
    (b / "nodes" / "g02").mkdir(parents=True)
    (b / "nodes" / "g02" / "kernel.log").write_text("")
    ingest_bundle(ruleset, store, b)
    with store.begin() as c:
        before = c.execute(text(
            "SELECT v.outcome, v.culprit_nodes, v.culprit_evidence FROM attribution.verdicts v "
            "JOIN attribution.jobs j ON v.id = j.current_verdict_id WHERE j.job_id = '301'")).one()
    assert tuple(before) == ("host", ["g02"], ["job_output"])
    pack = pack_with_new_rule(ROOT, tmp_path / "pack")
    r = CliRunner().invoke(main, ["reattribute", "--rules", str(pack), "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["totals"] == [{"transition": "host -> gpu_hardware", "jobs": 1}]
    sd.load_policy(store, load_policy(ruleset))
    with store.begin() as c:
        after = c.execute(text(
            "SELECT v.outcome, v.root_kind, v.culprit_nodes, v.culprit_evidence FROM attribution.verdicts v "
            "JOIN attribution.jobs j ON v.id = j.current_verdict_id WHERE j.job_id = '301'")).one()
        marks = c.execute(text("SELECT kind, node, evidence FROM attribution.events WHERE kind IN "
                               "('node_fail', 'gpu_fallen_off_bus') ORDER BY kind")).all()
        plan = c.execute(text("SELECT node FROM attribution.drain_candidates_at('2026-03-10T11:00:00Z') "
                              "ORDER BY node")).scalars().all()
    # the node failure only job output claims is not explained by g01's GPU: it stays a culprit, marked as such
    assert tuple(after) == ("gpu_hardware", "gpu_fallen_off_bus", ["g01", "g02"], ["system", "job_output"])
    assert [tuple(m) for m in marks] == [("gpu_fallen_off_bus", "g01", "system"), ("node_fail", "g02", "job_output")]
    assert plan == ["g01"]  # an hour after the job: the kernel's fault drains g01, job output drains nothing
