"""What a failure cost (verdict `cost`, the lost_gpu_hours view, the fleet report), values computed by hand."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import text

from attribution.correlate.cost import failure_cost
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.ingest import ingest_bundle
from attribution.reports.render import verdict_to_dict
from attribution.store.reports import fleet_data

from tests.harness.replay import TRACEBACK, XID79, failed_job_bundle

# jobs run 08:00-10:00 on one node of 8 GPUs: 16 GPU-hours held
MEGATRON_0900 = "[2026-03-10 09:00:00] successfully saved checkpoint at iteration     500 to /ckpt"
TITAN_0930 = ("[rank0]:2026-03-10 09:30:00,000 - root - INFO - Finished saving the checkpoint (or staging if async "
              "is enabled)in 5.53 seconds.")
LIGHTNING = ("Epoch 0, global step 874: 'val_loss' reached 0.07367 (best 0.07367), saving model to "
             "'/ckpt/best.ckpt' as top 1")


def test_lost_gpu_hours_count_from_the_last_timestamped_checkpoint_else_the_whole_run(ruleset, tmp_path):
    both = failed_job_bundle(tmp_path / "a", "1", "g01", [XID79], job_lines=(MEGATRON_0900, TITAN_0930),
                             start="2026-03-10T08:00:00Z")
    cost = verdict_to_dict(diagnose_bundle(ruleset, both).verdict)["cost"]
    assert cost == {"gpus": 8, "run_hours": 2.0, "last_checkpoint": "2026-03-10T09:30:00Z",
                    "basis": "last_checkpoint", "gpu_hours_lost": 4.0}  # 8 GPUs x 30 min
    untimed = failed_job_bundle(tmp_path / "b", "2", "g01", [XID79], job_lines=(LIGHTNING,))
    assert verdict_to_dict(diagnose_bundle(ruleset, untimed).verdict)["cost"] == {
        "gpus": 8, "run_hours": 2.0, "last_checkpoint": None, "basis": "run_time", "gpu_hours_lost": 16.0}
    ok = failed_job_bundle(tmp_path / "c", "3", "g01", [], state="COMPLETED", exit_code="0:0")
    assert verdict_to_dict(diagnose_bundle(ruleset, ok).verdict)["cost"] is None


def test_a_checkpoint_outside_the_run_does_not_count(ruleset, tmp_path):
    from attribution.scope.bundle import load_context

    b = failed_job_bundle(tmp_path / "a", "1", "g02", [XID79], job_lines=(MEGATRON_0900,),
                          start="2026-03-10T09:10:00Z")  # the save predates this job (a resumed run's log)
    d = diagnose_bundle(ruleset, b)
    ctx = load_context(b / "context.yaml")
    assert failure_cost(ctx, d.events, d.verdict.outcome)["basis"] == "run_time"
    assert d.verdict.cost["gpu_hours_lost"] == round(8 * 50 / 60, 4)


def test_the_view_and_the_fleet_report_sum_lost_gpu_hours_by_cause(ruleset, store, tmp_path):
    ingest_bundle(ruleset, store, failed_job_bundle(tmp_path / "a", "11", "g01", [XID79],
                                                    job_lines=(MEGATRON_0900,)))  # 8 x 1 h
    ingest_bundle(ruleset, store, failed_job_bundle(tmp_path / "b", "12", "g02", [XID79]))  # 8 x 2 h
    ingest_bundle(ruleset, store, failed_job_bundle(tmp_path / "c", "13", "g03", [],
                                                    job_lines=(TITAN_0930,) + TRACEBACK))  # 8 x 0.5 h
    with store.connect() as c:
        rows = c.execute(text("SELECT job_id, outcome, basis, gpus, gpu_hours_run, gpu_hours_lost "
                              "FROM attribution.lost_gpu_hours ORDER BY job_id")).all()
    assert [tuple(r) for r in rows] == [("11", "gpu_hardware", "last_checkpoint", 8, 16.0, 8.0),
                                        ("12", "gpu_hardware", "run_time", 8, 16.0, 16.0),
                                        ("13", "application", "last_checkpoint", 8, 16.0, 4.0)]
    data = fleet_data(store, weeks=1, until=datetime(2026, 3, 10, 12, tzinfo=timezone.utc))
    by = {(r["outcome"], r["cause"]): (r["jobs"], r["gpu_hours"], r["lost_gpu_hours"]) for r in data.failed_gpu_hours}
    assert by == {("gpu_hardware", "gpu_fallen_off_bus"): (2, 32.0, 24.0),
                  ("application", "python_exception"): (1, 16.0, 4.0)}
