"""Who could have written a line (docs/bundle.md "Trust", docs/verdict.md "Evidence a user could have written"):
job output may explain a failure but never drains a node, never places an event far outside the job, and never
changes the database's shape; a syslog line is a kernel line only with the tag `kernel`.

Each test is named after the finding of issue 18 it reproduces (H1..H3, L7)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import text

from attribution.drain.policy import load_policy
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.ingest import ingest_bundle
from attribution.reports.render import verdict_to_dict
from attribution.store import drain as sd

UTC = timezone.utc
NOW = datetime.now(UTC).replace(microsecond=0)
NODES = ["gpu007", "gpu008", "gpu009"]


def _bundle(root: Path, name: str, *, user: str, job_output: str = "", kernel: dict[str, str] | None = None,
            start: datetime | None = None, state: str = "FAILED") -> Path:
    b = root / name
    (b / "job").mkdir(parents=True)
    start = start or NOW - timedelta(hours=2)
    ctx = {"scheduler": "slurm", "cluster": "prod", "job_id": name, "user": user, "state": state,
           "exit_code": "1:0", "nodes": NODES, "start": start.isoformat(),
           "end": (start + timedelta(hours=1)).isoformat()}
    (b / "context.yaml").write_text(json.dumps(ctx))
    (b / "job" / f"slurm-{name}.out").write_text(job_output)
    for node in NODES:
        (b / "nodes" / node).mkdir(parents=True)
        (b / "nodes" / node / "kernel.log").write_text((kernel or {}).get(node, ""))
    return b


def _plan(store, ruleset):
    sd.load_policy(store, load_policy(ruleset))
    return {c.node: c for c in sd.candidates(store, "prod")}


# -- H1: a job prints srun's node-failure line ------------------------------------------------------------


def test_h1_job_output_srun_node_failure_is_a_culprit_resting_on_job_output(ruleset, tmp_path):
    b = _bundle(tmp_path, "9001", user="mallory", job_output="srun: error: Node failure on gpu008\n")
    v = verdict_to_dict(diagnose_bundle(ruleset, b).verdict)
    assert v["outcome"] == "host"
    assert v["culprits"] == [{"node": "gpu008", "gpu": None, "evidence": "job_output"}]
    assert v["confidence"] in ("medium", "low")
    assert v["root_cause"]["evidence"] == "job_output"


def test_h1_job_output_srun_node_failure_drains_nothing(ruleset, store, tmp_path):
    """Two users' jobs printing the line made `culprit-two-users` drain gpu008; now nothing is planned."""
    for i, user in enumerate(("mallory", "trudy", "eve")):
        ingest_bundle(ruleset, store, _bundle(tmp_path, f"900{i}", user=user,
                                              job_output="srun: error: Node failure on gpu008\n",
                                              start=NOW - timedelta(hours=3 + i)))
    with store.connect() as c:
        stored = c.execute(text("SELECT DISTINCT evidence FROM attribution.events WHERE kind = 'node_fail'")).all()
        culprits = c.execute(text("SELECT culprit_nodes, culprit_evidence FROM attribution.verdicts")).all()
    assert stored == [("job_output",)]
    assert culprits and all(r == (["gpu008"], ["job_output"]) for r in culprits)
    assert _plan(store, ruleset) == {}


def test_h1_system_evidence_still_drains(ruleset, store, tmp_path):
    """The same policy over kernel lines: two users' jobs whose culprit a kernel Xid names still drain."""
    line = ("Mar 10 08:30:00 gpu008 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.\n")
    start = NOW - timedelta(hours=2)
    at = start + timedelta(minutes=10)
    stamp = f"{at:%b} {at.day:>2} {at:%H:%M:%S}"
    ingest_bundle(ruleset, store, _bundle(tmp_path, "9100", user="alice", start=start,
                                          kernel={"gpu008": line.replace("Mar 10 08:30:00", stamp)}))
    plan = _plan(store, ruleset)
    assert set(plan) == {"gpu008"} and plan["gpu008"].score >= 100


# -- H2: a `logger` line is not a kernel line -------------------------------------------------------------


def test_h2_syslog_line_with_another_tag_is_not_a_kernel_xid(ruleset, store, tmp_path):
    start = NOW - timedelta(hours=2)
    at = (start + timedelta(minutes=10))
    stamp = f"{at:%b} {at.day:>2} {at:%H:%M:%S}"
    forged = (f"{stamp} gpu009 mallory[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off "
              f"the bus.\n")
    b = _bundle(tmp_path, "9200", user="mallory", start=start, kernel={"gpu009": forged})
    d = diagnose_bundle(ruleset, b)
    assert [e for e in d.events if e.kind == "gpu_fallen_off_bus"] == []
    ingest_bundle(ruleset, store, b)
    assert _plan(store, ruleset) == {}


def test_h2_syslog_line_tagged_kernel_is_a_kernel_xid(ruleset, tmp_path):
    start = NOW - timedelta(hours=2)
    at = (start + timedelta(minutes=10))
    stamp = f"{at:%b} {at.day:>2} {at:%H:%M:%S}"
    real = f"{stamp} gpu009 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    d = diagnose_bundle(ruleset, _bundle(tmp_path, "9201", user="alice", start=start, kernel={"gpu009": real}))
    evs = [e for e in d.events if e.kind == "gpu_fallen_off_bus"]
    assert len(evs) == 1 and evs[0].evidence == "system"


# -- H3 / L7: hostile time stamps, and ingest never changes the database's shape ---------------------------


def _hostile_output(months: int) -> str:
    lines = []
    for i in range(months):
        year = 1001 + i * 500 if i < 16 else 1001 + i
        lines.append(f"[rank0]:[E{(i % 12) + 1:02d}01 00:00:00.000] {year:04d}-{(i % 12) + 1:02d}-01T00:00:00Z "
                     f"NCCL WARN NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129")
        lines.append(f"{year:04d}-{(i % 12) + 1:02d}-01T00:00:00Z gpu007:1:1 [0] NCCL WARN NET/IB : Got completion "
                     f"from peer 10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129")
    return "\n".join(lines) + "\n"


def _partitions(store) -> set[str]:
    with store.connect() as c:
        return set(c.execute(text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'attribution.events'::regclass")).scalars())


def test_h3_job_output_timestamps_far_outside_the_window_are_not_believed(ruleset, tmp_path):
    b = _bundle(tmp_path, "9300", user="mallory", job_output=_hostile_output(16))
    d = diagnose_bundle(ruleset, b)
    job = [e for e in d.events if e.source == "job"]
    assert job, "the hostile lines are still evidence"
    assert all(e.time is None for e in job)


def test_h3_hostile_timestamps_create_no_partition_and_take_no_table_lock(ruleset, store, tmp_path):
    before = _partitions(store)
    b = _bundle(tmp_path, "9301", user="mallory", job_output=_hostile_output(16))
    # a kernel line (system-written) of a month no partition covers lands in the default partition
    (b / "nodes" / "gpu007" / "kernel.log").write_text(
        "2004-02-03T04:05:06+00:00 gpu007 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen "
        "off the bus.\n")
    seen_locks: list[str] = []
    stop = threading.Event()

    def watch():  # every AccessExclusive lock on the events table while the ingest runs
        with store.connect() as c:
            while not stop.is_set():
                seen_locks.extend(c.execute(text(
                    "SELECT mode FROM pg_locks WHERE relation = 'attribution.events'::regclass "
                    "AND mode = 'AccessExclusiveLock'")).scalars())
                c.commit()

    t = threading.Thread(target=watch)
    t.start()
    try:
        ingest_bundle(ruleset, store, b)
    finally:
        stop.set()
        t.join()
    assert _partitions(store) == before
    assert seen_locks == []
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.events WHERE occurred_at < '2005-01-01'")).scalar() == 1
        # the job's own lines are placed at the job's end, untimestamped
        assert c.execute(text("SELECT count(*) FROM attribution.events WHERE source = 'job' AND time_exact")
                         ).scalar() == 0


def test_h3_l7_ingest_executes_no_ddl(ruleset, store, tmp_path):
    """Structural, not statistical: the statements an ingest sends contain no CREATE/ALTER of a table
    (partition DDL inside ingest transactions deadlocked parallel first ingests, L7)."""
    from sqlalchemy import event

    sent: list[str] = []

    def record(conn, cursor, statement, *a):
        sent.append(statement)

    event.listen(store, "before_cursor_execute", record)
    try:
        ingest_bundle(ruleset, store, _bundle(tmp_path, "9302", user="mallory", job_output=_hostile_output(3)))
    finally:
        event.remove(store, "before_cursor_execute", record)
    assert sent
    bad = [s for s in sent if "ensure_event_partition" in s or "PARTITION OF" in s.upper()]
    assert bad == []


def test_l7_parallel_first_ingests_of_many_months_do_not_deadlock(ruleset, store, tmp_path):
    """32 parallel ingests, each with kernel lines of distinct months: every one stores (no deadlock)."""
    from concurrent.futures import ThreadPoolExecutor

    bundles = []
    for i in range(32):
        b = _bundle(tmp_path, f"94{i:02d}", user=f"u{i}")
        lines = "".join(f"20{10 + (i + k) % 14:02d}-{(k % 12) + 1:02d}-03T04:05:06+00:00 gpu007 kernel: NVRM: Xid "
                        f"(PCI:0000:3b:00): 13, Graphics Exception\n" for k in range(12))
        (b / "nodes" / "gpu007" / "kernel.log").write_text(lines)
        bundles.append(b)
    from attribution.pipeline.ingest import ingest

    done = [diagnose_bundle(ruleset, b) for b in bundles]  # the scanner is per thread; ingest is what races
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda d: ingest(ruleset, store, d.context, list(d.events), list(d.coverage),
                                               "bundle"), done))
    assert len(results) == 32
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar() == 32


def test_h2_journald_is_read_through_its_kernel_transport_and_only_kernel_tags_count(ruleset, monkeypatch):
    from attribution.collect import live
    from attribution.collect.nodelogs import NodeLogSpec
    from attribution.scope.bundle import parse_context

    start = NOW - timedelta(hours=1)
    at = start + timedelta(minutes=5)
    iso = at.strftime("%Y-%m-%dT%H:%M:%S.000000+0000")
    out = (f"{iso} n1 mallory[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
           f"{iso} n1 kernel: NVRM: Xid (PCI:0000:5e:00): 79, pid=1, name=x, GPU has fallen off the bus.\n").encode()
    seen = {}

    def fake_run(cmd, timeout, max_bytes):
        seen["cmd"] = cmd
        return out, b"", 0, False

    monkeypatch.setattr(live, "_bounded_run", fake_run)
    ctx = parse_context(json.dumps({"cluster": "c", "job_id": "1", "nodes": ["n1"], "start": start.isoformat(),
                                    "end": NOW.isoformat()}))
    obs, cov = live.read_journal(NodeLogSpec("kernel", "n1", "journald"), ctx, ruleset.prefilter("kernel"), start,
                                 NOW, 5)
    assert "-k" in seen["cmd"] and "_TRANSPORT=kernel" in seen["cmd"]
    assert [o.line.split(" ", 3)[2] for o in obs] == ["kernel:"]
    assert any("other than kernel" in n for n in cov.notes)
