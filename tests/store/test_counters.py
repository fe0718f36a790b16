"""Counter snapshots in the store and through the hooks: counter events stored like the others (fault_events,
recurring faults, the drain plan), the absolute values in device_counters and gpu_counters_latest, and the node
hooks (hooks/prolog, hooks/epilog, as slurmd runs them, no Slurm) taking, comparing and shipping the snapshots
on a faked node with 8 GPUs and 8 HCAs (tests/harness/fakenode.py), reporting to a real `attribution serve`."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from attribution.frozen import replace
from attribution.collect.telemetry import read_node_telemetry
from attribution.drain.policy import load_policy
from attribution.model import ExecutionContext
from attribution.pipeline.diagnose import diagnose_bundle, telemetry_events
from attribution.pipeline.ingest import ingest, ingest_bundle
from attribution.pipeline.intake import decode_document, ingest_document
from attribution.store import drain as sd

from tests.conftest import CASES, ROOT
from tests.harness.documents import node_documents
from tests.harness.fakenode import FakeNode
from tests.harness.hooknode import Node

UTC = timezone.utc
CASE19 = CASES / "19-ecc-counters-grew-nccl-errors-only"


def test_counter_events_and_values_are_stored_once(ruleset, store):
    for _ in range(2):  # idempotent: the same bundle twice adds nothing
        ingest_bundle(ruleset, store, CASE19)
    with store.connect() as c:
        ev = c.execute(text("SELECT node, gpu, kind, role, source, jobs FROM attribution.fault_events "
                            "WHERE source = 'telemetry' ORDER BY kind")).all()
        rows = c.execute(text("SELECT node, phase, count(*) FROM attribution.device_counters "
                              "GROUP BY node, phase ORDER BY 1, 2")).all()
        latest = c.execute(text(
            "SELECT gpu, uuid, remapped_rows_uncorrectable, ecc_aggregate_uncorrectable, remap_pending, "
            "reset_required, last_job_id, driver FROM attribution.gpu_counters_latest "
            "WHERE node = 'ash-h100-02' ORDER BY gpu")).all()
    assert ev == [("ash-h100-02", "0000:61:00", "gpu_ecc_counter", "cause", "telemetry", 1)] * 2
    assert rows == [("ash-h100-01", "epilog", 8), ("ash-h100-01", "prolog", 8), ("ash-h100-02", "epilog", 8),
                    ("ash-h100-02", "prolog", 8)]
    assert len(latest) == 8
    by_gpu = {r[0]: r for r in latest}
    assert by_gpu["0000:61:00"][2:] == (1.0, 2.0, False, False, "5530917", "535.183.01")
    assert by_gpu["0000:61:00"][1] == "GPU-5e0c1a2b-7d3f-4e8a-9b61-0c2d4e6f8a13"
    assert by_gpu["0000:1b:00"][2:4] == (0.0, 0.0)


def _recent(ctx: ExecutionContext, job_id: str, days_ago: float) -> ExecutionContext:
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(days=days_ago)
    return replace(ctx, job_id=job_id, start=end - timedelta(hours=1), end=end)


def test_counted_memory_errors_in_two_jobs_drain_the_node(ruleset, store):
    """The counter events count toward drains like kernel lines (evidence written by the system): the same GPU
    counting uncorrectable errors in two jobs is drain-policy condition counted-memory-errors-repeat; one job is
    not (the two counters one error moves count once)."""
    d = diagnose_bundle(ruleset, CASE19)
    snaps = {n: read_node_telemetry(CASE19 / "nodes" / n, n) for n in d.context.nodes}
    sd.load_policy(store, load_policy(ruleset))
    for i, days in enumerate((9, 2)):
        ctx = _recent(d.context, f"77{i}", days)
        events = telemetry_events(ruleset, ctx, snaps)
        ingest(ruleset, store, ctx, events, [], "bundle", telemetry=snaps)
        plan = {c.node: c for c in sd.candidates(store, "ash")}
        if i == 0:
            assert plan == {}
    assert set(plan) == {"ash-h100-02"}
    ev = plan["ash-h100-02"].evidence[0]
    assert ev["condition"] == "counted-memory-errors-repeat" and len(ev["jobs"]) == 2
    assert plan["ash-h100-02"].reason.startswith("attribution: ecc-counters gpu 0000:61:00 job ")


def test_a_gpu_that_vanished_in_one_job_drains_its_node_at_once(ruleset, store):
    """Drain-policy condition gpu-vanished: one job in which a GPU of the prolog's snapshot is gone from the
    epilog's (case 23) names the node, as an Xid 79 would; a GPU that is still there (case 19's other node) does
    not."""
    case = CASES / "23-gpu-vanished-between-snapshots"
    d = diagnose_bundle(ruleset, case)
    snaps = {n: read_node_telemetry(case / "nodes" / n, n) for n in d.context.nodes}
    sd.load_policy(store, load_policy(ruleset))
    ctx = _recent(d.context, "7801", 1)
    events = telemetry_events(ruleset, ctx, snaps)
    assert [(e.kind, e.node, e.gpu) for e in events] == [("gpu_vanished", "ash-h100-02", "0000:61:00")]
    ingest(ruleset, store, ctx, events, [], "bundle", telemetry=snaps)
    plan = {c.node: c for c in sd.candidates(store, "ash")}
    assert set(plan) == {"ash-h100-02"}
    assert plan["ash-h100-02"].evidence[0]["condition"] == "gpu-vanished"
    assert plan["ash-h100-02"].reason.startswith("attribution: gpu-vanished gpu 0000:61:00")


def test_a_nodes_document_carries_its_snapshots_and_a_malformed_one_is_refused(ruleset, store):
    """The snapshot files as the node read them travel in its document; the centre parses them (the same parse as
    a bundle's) and stores every device's counters."""
    from attribution.errors import InputError

    [doc] = [d for d in node_documents(CASE19) if d["reporter"]["name"] == "ash-h100-02"]
    doc = json.loads(json.dumps(doc))
    assert set(doc["counters"]) >= {"prolog", "epilog"}
    ingest_document(ruleset, store, decode_document(doc, "test"))
    with store.connect() as c:
        n = c.execute(text("SELECT count(*) FROM attribution.device_counters WHERE node = 'ash-h100-02'")).scalar()
    assert n == 16
    bad = dict(doc, counters={"epilog": {"nvidia-smi.xml": 7}})
    with pytest.raises(InputError, match="counters"):
        decode_document(bad, "test")


# -- the hooks on a faked node ------------------------------------------------------------------------------------

class HookNode:
    """hooks/prolog and hooks/epilog on a faked node (n1 to n4: the module's tests share the service, each
    test's events are its node's), reporting to the service (tests/conftest.py node_service, whose database
    node_engine reads)."""

    def __init__(self, base: Path, service, job: str, name: str) -> None:
        self.base, self.job, self.name = base, job, name
        self.fake = FakeNode(base / "root")
        self.node = Node(base / "node", service.url, service.tokens["report"], job, name=name)
        self.node.kernel.write_text("[Tue Oct  6 07:00:00 2026] Linux version 6.8.0-60-generic (boot)\n")
        self.node.write_hook_env(extra=self.fake.hook_env())

    def close(self) -> None:
        self.node.close()

    def run(self, hook: str, exit_code: str = "0") -> subprocess.CompletedProcess:
        env = {"SLURM_JOB_ID": self.job, "SLURMD_NODENAME": self.name, "SLURM_NODELIST": self.name,
               "SLURM_JOB_EXIT_CODE": exit_code, "SLURM_SCRIPT_CONTEXT": f"{hook}_slurmd",
               "SLURM_CLUSTER_NAME": "hard", "ATTRIBUTION_HOOK_ENV": str(self.node.hook_env)}
        r = subprocess.run([str(ROOT / "hooks" / hook)], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
        return r

    def python_ran(self) -> list[str]:
        log = self.node.base / "hooks.log"
        return [ln for ln in log.read_text().splitlines() if "attribution epilog" in ln] if log.exists() else []

    def state_left(self) -> list[str]:
        state = self.node.base / "state"
        return sorted(p.name for p in state.iterdir()) if state.is_dir() else []


@pytest.fixture
def hook_node(tmp_path, node_service):
    made = []

    def make(job: str, name: str = "n1") -> HookNode:
        made.append(HookNode(tmp_path / f"n{len(made)}", node_service, job, name))
        return made[-1]

    yield make
    for n in made:
        n.close()


def test_clean_job_with_unchanged_counters_starts_no_python(hook_node, node_engine):
    node = hook_node("501")
    node.run("prolog")
    assert sorted(p.name for p in (node.node.base / "state" / "job-501.telemetry" / "prolog").iterdir()) == [
        "counters.key", "nvidia-smi.err", "nvidia-smi.xml", "sysfs.txt"]
    # the job ran: timestamps, temperatures, memory use and traffic counters moved; no watched counter did
    node.fake.set_smi(extra={i: {"gpu_temp": "75 C", "used": "70123 MiB"} for i in range(8)},
                      timestamp="Tue Oct  6 09:00:00 2026")
    node.fake.ib_counter(4, "port_xmit_data", 987654321)
    node.run("epilog")
    assert node.python_ran() == []
    assert node.state_left() == []
    with node_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs WHERE job_id = '501'")).scalar() == 0


def test_a_counter_that_grew_in_a_clean_job_starts_python_and_is_stored(hook_node, node_engine):
    node = hook_node("502")
    node.run("prolog")
    node.fake.set_smi({3: {"dram_uncorrectable": "2", "remapped_row_unc": "1"}})
    node.run("epilog")  # exit code 0, nothing in the kernel log: only the counters differ
    assert len(node.python_ran()) == 1 and "stored" in node.python_ran()[0], node.python_ran()
    assert node.state_left() == []
    with node_engine.connect() as c:
        ev = c.execute(text("SELECT node, gpu, kind, role, rule FROM attribution.fault_events "
                            "WHERE source = 'telemetry' AND node = 'n1' ORDER BY rule")).all()
        latest = c.execute(text("SELECT gpu, remapped_rows_uncorrectable, ecc_aggregate_uncorrectable "
                                "FROM attribution.gpu_counters_latest WHERE gpu = '0000:61:00' AND node = 'n1'")).all()
        ports = c.execute(text("SELECT count(*) FROM attribution.device_counters WHERE device_kind = 'ib_port' "
                               "AND phase = 'epilog' AND node = 'n1'")).scalar()
    assert ev == [("n1", "0000:61:00", "gpu_ecc_counter", "cause", "counters.gpu_remapped_rows_uncorrectable"),
                  ("n1", "0000:61:00", "gpu_ecc_counter", "cause", "counters.gpu_uncorrectable_ecc")]
    assert latest == [("0000:61:00", 1.0, 2.0)]
    assert ports == 8


def test_without_a_start_time_from_slurm_the_prolog_stamp_places_the_counter_events(hook_node, node_engine):
    """Slurm 22.05 gives the epilog no start time: the job starts when the prolog's stamp says, read from the
    hooks' state folder (hook.env's ATTRIBUTION_STATE_DIR, not the configuration's <home>/state). Before the
    epilog told the agent where that folder is, the start was a day's look-back before the end and the counter
    events, placed at the start, fell outside the job they were counted in."""
    node = hook_node("505", "n2")
    node.run("prolog")
    stamp = dict(ln.split("=", 1) for ln in (node.node.base / "state" / "job-505.start").read_text().splitlines())
    started = datetime.fromtimestamp(int(stamp["start"]), UTC)
    node.fake.set_smi({3: {"dram_uncorrectable": "2"}})
    node.run("epilog", exit_code="256")
    assert len(node.python_ran()) == 1 and "stored" in node.python_ran()[0], node.python_ran()
    with node_engine.connect() as c:
        start = c.execute(text("SELECT start_time FROM attribution.jobs WHERE job_id = '505'")).scalar()
        times = c.execute(text("SELECT DISTINCT occurred_at FROM attribution.fault_events "
                               "WHERE source = 'telemetry' AND node = 'n2'")).scalars().all()
    assert start == started
    assert times == [started]


def test_a_failed_job_with_a_link_down_ships_the_port_event(hook_node, node_engine):
    node = hook_node("503", "n3")
    node.fake.ib_counter(5, "link_downed", 1)
    node.run("prolog")
    node.fake.ib_counter(5, "link_downed", 2)
    node.fake.ib_counter(5, "symbol_error", 55)
    node.run("epilog", exit_code="256")
    assert len(node.python_ran()) == 1
    with node_engine.connect() as c:
        ev = c.execute(text("SELECT node, kind, role, outcome, message FROM attribution.fault_events "
                            "WHERE source = 'telemetry' AND node = 'n3' ORDER BY kind")).all()
        cov = c.execute(text("SELECT status, notes FROM attribution.coverage WHERE source = 'telemetry' "
                             "AND job_id = '503'")).all()
    assert [(n, k, r, o) for n, k, r, o, _ in ev] == [("n3", "ib_link_downed", "cause", "network"),
                                                      ("n3", "ib_port_errors", "context", None)]
    assert "mlx5_5/1: counters/link_downed 1 -> 2" in ev[0][4]
    assert cov == [("ok", [])]


def test_without_a_prolog_snapshot_the_epilog_alone_starts_no_python(hook_node, node_engine):
    """No prolog snapshot (hooks just installed): absolute values never make a clean job worth a look."""
    node = hook_node("504")
    node.fake.set_smi({3: {"dram_uncorrectable": "2"}})
    node.run("epilog")
    assert node.python_ran() == []
    assert node.state_left() == []
