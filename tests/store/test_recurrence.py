"""Recurrence: a workload (job id and its requeues, one job array, or one job name, of one user) failing again on
the same root cause is flagged in its verdict and listed by the failure_recurrence view."""

from __future__ import annotations

from sqlalchemy import text

from datetime import datetime, timezone

from attribution.pipeline.ingest import ingest_bundle
from attribution.reports.fleet_page import fleet_html
from attribution.store.reports import fleet_data

from tests.harness.replay import TRACEBACK, XID74, XID79, failed_job_bundle


def _doc(store, job_id, start):
    with store.connect() as c:
        return c.execute(text(
            "SELECT v.document FROM attribution.jobs j JOIN attribution.verdicts v ON v.id = j.current_verdict_id "
            "WHERE j.job_id = :j AND j.start_time = :s"), {"j": job_id, "s": start}).scalar_one()


def test_array_siblings_and_requeues_failing_on_the_same_cause_are_counted(ruleset, store, tmp_path):
    def job(name, job_id, node, kernel=(), out=(), day="10", user="u"):
        ingest_bundle(ruleset, store, failed_job_bundle(
            tmp_path / name, job_id, node, list(kernel), start=f"2026-03-{day}T08:00:00Z",
            end=f"2026-03-{day}T10:00:00Z", job_lines=tuple(out), user=user))

    job("a1", "400_1", "g01", out=TRACEBACK)
    job("a2", "400_2", "g02", out=TRACEBACK, day="11")
    job("a3", "400_3", "g03", out=TRACEBACK, day="12")
    job("other-user", "400_4", "g04", out=TRACEBACK, day="13", user="v")  # another user's: its own workload
    job("r1", "500", "g05", kernel=[XID79])
    job("r2", "500", "g06", kernel=[XID79], day="13")  # requeued (same id, days later), same cause elsewhere
    job("r3", "500", "g07", kernel=[XID74], day="16")  # the same workload failing on another cause

    assert _doc(store, "400_1", "2026-03-10T08:00:00Z").get("recurrence") is None
    assert _doc(store, "400_2", "2026-03-11T08:00:00Z")["recurrence"] == {
        "failure_number": 2, "earlier_jobs": ["400_1"], "workload": "400", "by": "job_id",
        "message": "second failure of this workload on the same cause (python_exception)"}
    assert _doc(store, "400_3", "2026-03-12T08:00:00Z")["recurrence"] == {
        "failure_number": 3, "earlier_jobs": ["400_1", "400_2"], "workload": "400", "by": "job_id",
        "message": "third failure of this workload on the same cause (python_exception)"}
    assert _doc(store, "400_4", "2026-03-13T08:00:00Z").get("recurrence") is None
    assert _doc(store, "500", "2026-03-13T08:00:00Z")["recurrence"]["failure_number"] == 2
    assert _doc(store, "500", "2026-03-16T08:00:00Z").get("recurrence") is None
    with store.connect() as c:
        rows = c.execute(text("SELECT job_id, workload, root_kind, failure_number, first_job_id "
                              "FROM attribution.failure_recurrence ORDER BY job_start")).all()
    assert [tuple(r) for r in rows] == [("400_2", "400", "python_exception", 2, "400_1"),
                                        ("400_3", "400", "python_exception", 3, "400_1"),
                                        ("500", "500", "gpu_fallen_off_bus", 2, "500")]

    # the fleet report of the two weeks 2026-03-09 to 03-22: the two workloads, the one failing most first; each
    # repeat ran 2 h on 8 GPUs and saved no checkpoint: 16 GPU-hours lost each
    data = fleet_data(store, weeks=2, until=datetime(2026, 3, 16, 12, tzinfo=timezone.utc))
    assert [(r["workload"], r["user_name"], r["outcome"], r["root_kind"], r["failures"], r["first_job_id"],
             r["last_job_id"], r["repeats_in_period"], r["repeats_lost_gpu_hours"]) for r in data.recurring_failures] == [
        ("400", "u", "application", "python_exception", 3, "400_1", "400_3", 2, 32.0),
        ("500", "u", "gpu_hardware", "gpu_fallen_off_bus", 2, "500", "500", 1, 16.0)]
    page = fleet_html(data, bundle="")
    table = page.split('<table id="recurring-failures">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 3 and "<td>400_3</td>" in table and '<td class="num">32.0</td>' in table
    later = fleet_data(store, weeks=1, until=datetime(2026, 3, 30, 12, tzinfo=timezone.utc))
    assert later.recurring_failures == []
    assert 'id="recurring-failures">No workload failed again' in fleet_html(later, bundle="")


def _named(ruleset, store, tmp_path, folder, job_id, node, day, name, user="u", kernel=(), out=TRACEBACK):
    ingest_bundle(ruleset, store, failed_job_bundle(
        tmp_path / folder, job_id, node, list(kernel), start=f"2026-03-{day}T08:00:00Z",
        end=f"2026-03-{day}T10:00:00Z", job_lines=tuple(out), user=user, job_name=name))


def test_resubmissions_under_new_ids_with_the_same_name_and_user_are_one_workload(ruleset, store, tmp_path):
    """Three jobs named train-llama by user u, ids 601, 702, 803 on three days, each a Python exception: the
    first, second and third failure of one workload."""
    for folder, job_id, node, day in (("n1", "601", "g01", "10"), ("n2", "702", "g02", "11"),
                                      ("n3", "803", "g03", "12")):
        _named(ruleset, store, tmp_path, folder, job_id, node, day, "train-llama")
    assert _doc(store, "601", "2026-03-10T08:00:00Z").get("recurrence") is None
    assert _doc(store, "702", "2026-03-11T08:00:00Z")["recurrence"] == {
        "failure_number": 2, "earlier_jobs": ["601"], "workload": "train-llama", "by": "job_name",
        "message": "second failure of this workload on the same cause (python_exception)"}
    assert _doc(store, "803", "2026-03-12T08:00:00Z")["recurrence"] == {
        "failure_number": 3, "earlier_jobs": ["601", "702"], "workload": "train-llama", "by": "job_name",
        "message": "third failure of this workload on the same cause (python_exception)"}
    with store.connect() as c:
        assert c.execute(text("SELECT job_name FROM attribution.jobs ORDER BY job_id")).scalars().all() == [
            "train-llama"] * 3
        rows = c.execute(text("SELECT job_id, workload, workload_by, job_name, failure_number, first_job_id "
                              "FROM attribution.failure_recurrence ORDER BY job_start")).all()
    assert [tuple(r) for r in rows] == [("702", "train-llama", "job_name", "train-llama", 2, "601"),
                                        ("803", "train-llama", "job_name", "train-llama", 3, "601")]
    data = fleet_data(store, weeks=2, until=datetime(2026, 3, 16, 12, tzinfo=timezone.utc))
    assert [(r["workload"], r["workload_by"], r["user_name"], r["failures"], r["first_job_id"], r["last_job_id"],
             r["repeats_in_period"]) for r in data.recurring_failures] == [
        ("train-llama", "job_name", "u", 3, "601", "803", 2)]
    table = fleet_html(data, bundle="").split('<table id="recurring-failures">', 1)[1].split("</table>", 1)[0]
    assert "<b>train-llama</b>" in table and "job name" in table


def test_a_job_name_never_groups_two_users_jobs_nor_two_causes(ruleset, store, tmp_path):
    """train-llama of user u (Python exception), of user v (same cause), and of u again on another cause (Xid
    79 on g03): three first failures. The name is user-written: another user naming a job the same joins
    nothing."""
    _named(ruleset, store, tmp_path, "u1", "601", "g01", "10", "train-llama")
    _named(ruleset, store, tmp_path, "v1", "702", "g02", "11", "train-llama", user="v")
    _named(ruleset, store, tmp_path, "u2", "803", "g03", "12", "train-llama", kernel=[XID79], out=())
    for job_id, day in (("601", "10"), ("702", "11"), ("803", "12")):
        assert _doc(store, job_id, f"2026-03-{day}T08:00:00Z").get("recurrence") is None
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.failure_recurrence")).scalar_one() == 0


def test_a_job_without_a_name_joins_the_named_workload_of_its_job_id(ruleset, store, tmp_path):
    """Job 900 named nightly, then requeued as 900 days later without a name known (only its nodes reported it),
    then resubmitted as 905 named nightly: one workload, failures 1..3, all on the same cause."""
    _named(ruleset, store, tmp_path, "a", "900", "g01", "10", "nightly")
    _named(ruleset, store, tmp_path, "b", "900", "g02", "13", None)
    _named(ruleset, store, tmp_path, "c", "905", "g03", "16", "nightly")
    assert _doc(store, "900", "2026-03-13T08:00:00Z")["recurrence"]["failure_number"] == 2
    assert _doc(store, "905", "2026-03-16T08:00:00Z")["recurrence"]["earlier_jobs"] == ["900", "900"]
    with store.connect() as c:
        rows = c.execute(text("SELECT job_id, workload, failure_number FROM attribution.failure_recurrence "
                              "ORDER BY job_start")).all()
    assert [tuple(r) for r in rows] == [("900", "nightly", 2), ("905", "nightly", 3)]
