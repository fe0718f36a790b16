"""watch/runs.py: which Workload state ends a run, its key (the same in every later copy, another for the next
attempt), its number by Kueue's eviction count, and the job a run is stored as."""

from __future__ import annotations

from attribution.watch.runs import attempt_job_id, run_end


def _wl(*conds, stats=None):
    wl = {"metadata": {"namespace": "ns", "name": "w", "uid": "u"},
          "status": {"conditions": [{"type": t, "status": s, "reason": r, "lastTransitionTime": at}
                                    for t, s, r, at in conds]}}
    if stats is not None:
        wl["status"]["schedulingStats"] = {"evictions": stats}
    return wl


def test_running_is_no_end_and_a_success_is_an_end_that_did_not_fail():
    assert run_end(_wl(("Admitted", "True", "Admitted", "2026-03-10T09:00:00Z"))) is None
    end = run_end(_wl(("Finished", "True", "Succeeded", "2026-03-10T10:00:00Z")))
    assert end is not None and not end.failed


def test_an_eviction_and_the_next_runs_end_are_two_runs_numbered_by_kueues_count():
    evicted = run_end(_wl(("Admitted", "True", "Admitted", "t0"), ("Evicted", "True", "Preempted",
                                                                     "2026-03-10T09:30:00Z"),
                          stats=[{"reason": "Preempted", "count": 1}]))
    again = run_end(_wl(("Evicted", "False", "QuotaReserved", "2026-03-10T09:40:00Z"),
                        ("Finished", "True", "Failed", "2026-03-10T10:00:00Z"),
                        stats=[{"reason": "Preempted", "count": 1}]))
    assert evicted.failed and again.failed and evicted.key != again.key
    assert (evicted.kueue_attempt, again.kueue_attempt) == (1, 2)
    assert run_end(_wl(("Finished", "True", "Failed", "2026-03-10T10:00:00Z"))).kueue_attempt is None
    assert attempt_job_id("ns", "w", 1) == "ns/w" and attempt_job_id("ns", "w", 2) == "ns/w@2"
