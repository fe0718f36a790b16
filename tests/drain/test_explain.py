"""attribution/drain/explain.py: why a node is or is not a drain candidate, in words."""

from __future__ import annotations

from datetime import datetime, timezone

from attribution.drain.explain import progress, summary

UTC = timezone.utc
CONDITIONS = [
    {"condition_id": "gpu-lost", "recurrence": False, "min_count": 1, "window_days": 14, "unit": "events"},
    {"condition_id": "nvlink-repeat", "recurrence": False, "min_count": 2, "window_days": 7, "unit": "jobs"},
    {"condition_id": "nvlink-weekly", "recurrence": True, "min_count": 3, "window_days": 56, "unit": "weeks"},
    {"condition_id": "culprit-two-users", "recurrence": False, "min_count": 2, "window_days": 7, "unit": "users"},
]
REBOOT = datetime(2026, 3, 10, 11, 0, tzinfo=UTC)


def _row(cid, counted, seen, gpu=None, reset=None):
    return {"condition_id": cid, "gpu": gpu, "counted": counted, "seen": seen, "weeks": [],
            "reset_at": reset and reset[1], "reset_what": reset and reset[0], "reset_source": reset and reset[2]}


def test_a_met_condition_says_candidate_and_comes_first():
    items = progress(CONDITIONS, [_row("nvlink-weekly", 5, 5), _row("nvlink-repeat", 1, 1)])
    assert [p.condition for p in items][:2] == ["nvlink-weekly", "nvlink-repeat"]
    assert items[0].text() == "nvlink-weekly: 5 weeks of 3 needed: candidate"
    assert items[1].text() == "nvlink-repeat: 1 job of 2 needed within 7 days"
    assert summary(items) == "nvlink-weekly: 5 weeks of 3 needed: candidate"


def test_evidence_a_reboot_cleared_says_so():
    items = progress(CONDITIONS, [_row("gpu-lost", 0, 1, gpu="0000:3b:00", reset=("boot", REBOOT, "kernel"))])
    assert items[0].condition == "gpu-lost" and not items[0].met and items[0].cleared == 1
    assert items[0].text() == ("gpu-lost: 1 event on gpu 0000:3b:00, but after it the node rebooted at "
                               "2026-03-10 11:00:00Z (its kernel's banner): 0 of 1 counted since")
    assert summary(items).startswith("nearest gpu-lost: 1 event on gpu 0000:3b:00, but after it the node rebooted")
    resumed = progress(CONDITIONS, [_row("gpu-lost", 0, 1, reset=("resume", REBOOT, "slurm"))])[0]
    assert "but after it the node was resumed at 2026-03-10 11:00:00Z (Slurm)" in resumed.text()


def test_the_best_gpu_stands_for_a_per_gpu_condition_and_nothing_is_said_as_such():
    items = progress(CONDITIONS, [_row("nvlink-weekly", 1, 1, gpu="0000:1b:00"),
                                  _row("nvlink-weekly", 2, 2, gpu="0000:52:00")])
    assert items[0].text() == "nvlink-weekly: 2 weeks on gpu 0000:52:00 of 3 needed within 56 days"
    assert {p.text() for p in items[1:]} == {"gpu-lost: nothing within 14 days", "nvlink-repeat: nothing within 7 days",
                                              "culprit-two-users: nothing within 7 days"}
    assert summary(progress(CONDITIONS, [])) == "no evidence for any condition of the drain policy"


def test_a_recurrence_condition_clears_nothing():
    p = progress(CONDITIONS, [_row("nvlink-weekly", 2, 2, reset=("boot", REBOOT, "slurm"))])[0]
    assert p.cleared == 0 and p.text() == "nvlink-weekly: 2 weeks of 3 needed within 56 days"
    assert p.to_dict()["reset"] == {"what": "boot", "at": REBOOT, "source": "slurm"}
