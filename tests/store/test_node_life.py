"""attribution/store/node_life.py and the plan over it (drain_conditions_at): a node rebooted, or resumed with
Slurm's own tools, after a one-shot fault is not drained again for it; the same fault again within the recurrence
window puts it back with both events; job output never makes a boot; Slurm's views become the node's life.

The history (cluster `life`, 8 GPUs per node, one node per job), written as journals the way incident 07 is:
  g05: job 501 (03-10 00:30-02:10) Xid 79 at 02:00; rebooted at 11:00 (the new boot is in job 502's journal);
       job 502 (12:00-14:00) completes; job 503 (03-12 10:00-12:00) Xid 79 again at 11:50.
  g06: job 511 (03-10 00:30-02:10) Xid 79 at 02:00; Slurm: drained by root at 03:00, resumed between the views of
       04:00 and 06:00 (scontrol update State=RESUME); BootTime unchanged (03-09 08:00).
  g07: job 521 (03-10 00:30-02:10) Xid 79 at 02:00; job 522 (12:00-14:00) prints the kernel banner in its output.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from attribution.drain.policy import NodeState, load_policy
from attribution.pipeline.ingest import ingest_bundle
from attribution.store import drain as sd
from attribution.store import node_life
from attribution.store.backtest import plan_as_of

from tests.harness.logs import write_context

UTC = timezone.utc
BANNER = ("kernel: Linux version 6.8.0-57-generic (buildd@lcy02-amd64-120) (x86_64-linux-gnu-gcc-12 (Ubuntu "
          "12.3.0-1ubuntu1~22.04) 12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #65~22.04.1-Ubuntu SMP "
          "PREEMPT_DYNAMIC Fri Jan 10 15:21:56 UTC 2025")
XID79 = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
GPU = "0000:3b:00"


def t(day: int, hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 3, day, hh, mm, tzinfo=UTC)


def _journal(node: str, lines: list[tuple[datetime | None, str]]) -> str:
    out = []
    for when, msg in lines:
        out.append(msg if when is None else f"{when:%b %d %H:%M:%S} {node} {msg}")
    return "\n".join(out) + "\n"


def _job(root: Path, job_id: str, node: str, start: datetime, end: datetime, state: str,
         journal: list[tuple[datetime | None, str]], output: str = "") -> Path:
    b = root / job_id
    write_context(b, cluster="life", job_id=job_id, nodes=node, state=state, user="alice",
                  exit_code="0:0" if state == "COMPLETED" else "134:0", start=start.isoformat(),
                  end=end.isoformat(), gpus_per_node=8)
    (b / "nodes" / node).mkdir(parents=True, exist_ok=True)
    (b / "nodes" / node / "kernel.log").write_text(_journal(node, journal))
    (b / "job").mkdir(exist_ok=True)
    (b / "job" / f"slurm-{job_id}.out").write_text(output or f"[{start:%Y-%m-%d %H:%M:%S}] step 1 loss 1.0\n")
    return b


BOOT1 = (None, "-- Boot 4b9f0a3c5d6e47a1b2c3d4e5f60718a9 --")
BOOT2 = (None, "-- Boot 0c71e52d9a8b4f06a1e2d3c4b5a69788 --")


def history(root: Path) -> list[Path]:
    first = [BOOT1, (t(9, 8), BANNER), (t(10, 2), XID79)]
    return [
        _job(root, "501", "g05", t(10, 0, 30), t(10, 2, 10), "FAILED", first),
        _job(root, "502", "g05", t(10, 12), t(10, 14), "COMPLETED", first + [BOOT2, (t(10, 11), BANNER)]),
        _job(root, "503", "g05", t(12, 10), t(12, 12), "FAILED", [BOOT2, (t(10, 11), BANNER), (t(12, 11, 50), XID79)]),
        _job(root, "511", "g06", t(10, 0, 30), t(10, 2, 10), "FAILED", first),
        _job(root, "521", "g07", t(10, 0, 30), t(10, 2, 10), "FAILED", first),
        _job(root, "522", "g07", t(10, 12), t(10, 14), "COMPLETED", [BOOT1, (t(9, 8), BANNER)],
             output=f"[2026-03-10 12:00:01] {BANNER.split(': ', 1)[1]}\n"),  # the job printed /proc/version
    ]


def _slurm_views(store) -> None:
    boot = t(9, 8)
    node_life.sync(store, "life", {"g06": NodeState("g06", "IDLE+DRAIN", "gpu 3 lost", "root", t(10, 3), boot)},
                   t(10, 4))
    node_life.sync(store, "life", {"g06": NodeState("g06", "IDLE", None, None, None, boot)}, t(10, 6))


@pytest.fixture
def life(ruleset, store, tmp_path):
    for b in history(tmp_path / "h"):
        ingest_bundle(ruleset, store, b)
    _slurm_views(store)
    policy = load_policy(ruleset)
    sd.load_policy(store, policy)  # the policy in force, which the node page explains
    return policy


def _plan(store, policy, at):
    return {c.node: c for c in plan_as_of(store, policy, at, "life")}


def test_each_node_is_planned_an_hour_after_its_fault(store, life):
    assert set(_plan(store, life, t(10, 3))) == {"g05", "g06", "g07"}


def test_a_node_rebooted_after_its_gpu_fell_off_is_not_planned_a_day_later(store, life):
    plan = _plan(store, life, t(11, 2))
    assert "g05" not in plan
    with store.connect() as c:
        items = {p.condition: p for p in sd.node_progress(c, "life", "g05", t(11, 2))}
    assert items["gpu-lost"].text() == (f"gpu-lost: 1 event on gpu {GPU}, but after it the node rebooted at "
                                        "2026-03-10 11:00:00Z (its kernel's banner): 0 of 1 counted since")
    assert items["gpu-lost-again"].text() == f"gpu-lost-again: 1 job on gpu {GPU} of 2 needed within 14 days"


def test_a_node_resumed_with_scontrol_after_its_fault_is_not_planned(store, life):
    assert "g06" not in _plan(store, life, t(11, 2))
    with store.connect() as c:
        gpu_lost = next(p for p in sd.node_progress(c, "life", "g06", t(11, 2)) if p.condition == "gpu-lost")
        rows = c.execute(text("SELECT what, at, source, actor FROM attribution.node_life WHERE node = 'g06' "
                              "ORDER BY at, what")).all()
    assert "but after it the node was resumed at 2026-03-10 04:00:00Z (Slurm)" in gpu_lost.text()
    assert [tuple(r) for r in rows] == [("boot", t(9, 8), "kernel", None), ("boot", t(9, 8), "slurm", None),
                                        ("drain", t(10, 3), "slurm", "root"), ("resume", t(10, 4), "slurm", None)]


def test_the_same_fault_again_within_the_window_puts_it_back_with_both_events(store, life):
    plan = _plan(store, life, t(12, 13))
    assert set(plan) == {"g05", "g07"}
    ev = {e["condition"]: e for e in plan["g05"].evidence}
    assert set(ev) == {"gpu-lost", "gpu-lost-again"}
    assert len(ev["gpu-lost"]["events"]) == 1  # one-shot: the fault after the reboot
    assert len(ev["gpu-lost-again"]["events"]) == 2 and ev["gpu-lost-again"]["recurrence"]
    assert [j["job_id"] for j in ev["gpu-lost-again"]["jobs"]] == ["501", "503"]
    assert plan["g05"].reason == f"attribution: xid79 gpu {GPU} job 503"


def test_the_plan_of_a_time_before_the_reboot_still_names_the_node(store, life):
    assert "g05" in _plan(store, life, t(10, 10, 59))  # --as-of replays the node's life too


def test_job_output_never_makes_a_boot(store, life):
    assert "g07" in _plan(store, life, t(11, 2))  # job 522 printed a banner at 12:00: g07 keeps its fault
    with store.connect() as c:
        boots = c.execute(text("SELECT at FROM attribution.node_life WHERE node = 'g07'")).scalars().all()
    assert boots == [t(9, 8)]  # only the banner of its kernel's journal


def test_the_node_page_says_why(store, life):
    from attribution.store.browse import node_history

    with store.connect() as c:
        h = node_history(c, "life", "g05", t(11, 2), days=30)
    # nearest: the recurrence condition one job short; and the one-shot one the reboot cleared
    assert h["drain_summary"] == (f"nearest gpu-lost-again: 1 job on gpu {GPU} of 2 needed within 14 days; "
                                  f"gpu-lost: 1 event on gpu {GPU}, but after it the node rebooted at "
                                  "2026-03-10 11:00:00Z (its kernel's banner): 0 of 1 counted since; "
                                  "culprit-two-users: 1 user, but after it the node rebooted at 2026-03-10 11:00:00Z "
                                  "(its kernel's banner): 0 of 2 counted since")
    assert [r["what"] for r in h["life"]] == ["boot", "boot"]  # 03-10 11:00 and 03-09 08:00, newest first
    assert h["life"][0]["at"] == "2026-03-10T11:00:00Z" and h["life"][0]["sources"] == ["kernel"]


def test_syncing_the_same_view_twice_adds_nothing(store):
    view = {"n1": NodeState("n1", "IDLE+DRAIN", "bad gpu", "root", t(10, 3), t(9, 8))}
    first = node_life.sync(store, "c", view, t(10, 4))
    assert [c.what for c in first] == ["boot", "drain"]
    assert node_life.sync(store, "c", view, t(10, 5)) == []
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.node_life")).scalar() == 2
        assert node_life.node_state(c, "c", "n1")["seen_at"] == t(10, 5)


def test_a_recurrence_of_culprits_counts_the_failed_jobs_before_the_reboot_too(store, life):
    """`recurrence: {culprit_of_failed_jobs: {distinct: jobs}}`: g05 was the culprit of jobs 501 and 503, the
    reboot between them; the same condition one-shot counts 503 only."""
    from attribution import frozen
    from attribution.rulepack.values import Condition

    culprits = Condition(id="culprit-recurring", min_count=2, window_days=14, label="culprit", score=30,
                         culprit_distinct="jobs", recurrence=True)
    one_shot = frozen.replace(culprits, id="culprit-twice", recurrence=False)
    policy = frozen.replace(life, version="test-culprits", conditions=(culprits, one_shot))
    plan = _plan(store, policy, t(12, 13))
    assert set(plan) == {"g05"}
    (ev,) = plan["g05"].evidence
    assert ev["condition"] == "culprit-recurring" and [j["job_id"] for j in ev["jobs"]] == ["501", "503"]
    assert plan["g05"].reason.startswith("attribution: culprit weeks 2026-W11 job 503")
