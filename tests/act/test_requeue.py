"""The requeue policy (act/requeue.py): the shipped file, its checks, and the decision for one job from its
verdict, the audit's counts and what Slurm says of the job now. The verdicts are the incidents' (a GPU off the bus
on hx-gpu019, a node failure on qk0102, a job's own KeyError); the live records are `scontrol show job -o` fields
as Slurm 22.05 and 24.11 print them (docs/job-actions.md)."""

from __future__ import annotations

import copy
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from attribution.act.requeue import Counts, decide, excluded_with, load_requeue_policy, policy_problems
from attribution.errors import PolicyError
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict
from attribution.rulepack.load import load_rules

from tests.conftest import INCIDENTS, ROOT

UTC = timezone.utc
NOW = datetime(2026, 3, 10, 9, 40, tzinfo=UTC)  # 15 minutes after incident 01's job ended
#: inside EpilogSlurmctld a job that failed is COMPLETING (measured on 22.05.8 and 24.11.5)
LIVE = {"JobState": "COMPLETING", "Requeue": "1", "BatchFlag": "1", "ExcNodeList": "(null)", "Restarts": "0"}


@pytest.fixture(scope="module")
def policy(ruleset):
    return load_requeue_policy(ruleset)


@pytest.fixture(scope="module")
def docs(ruleset):
    return {name: verdict_to_dict(diagnose_bundle(ruleset, INCIDENTS / name).verdict)
            for name in ("01-xid79-fallen-off-bus", "07-app-python-keyerror", "10-node-fail-no-logs")}


def _bus(docs, **job):
    doc = copy.deepcopy(docs["01-xid79-fallen-off-bus"])
    doc["job"].update(job)
    return doc


def test_the_shipped_policy_requeues_infrastructure_failures_only(policy):
    assert set(policy.outcomes) == {"gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host"}
    assert "CANCELLED" not in policy.job_states and "FAILED" in policy.job_states
    assert policy.max_per_job >= 1 and policy.max_per_hour >= policy.max_per_user_per_hour


def test_rules_check_refuses_a_policy_that_requeues_the_applications_failures(tmp_path):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    f = pack / "requeue-policy.yaml"
    f.write_text(f.read_text().replace("outcomes: [gpu_hardware,", "outcomes: [application, gpu_hardware,"))
    rs = load_rules(pack)
    problems = policy_problems(rs)
    assert len(problems) == 1 and "'application' is not an infrastructure outcome" in problems[0].message
    with pytest.raises(PolicyError):
        load_requeue_policy(rs)


def test_a_pack_without_a_requeue_policy_has_none(tmp_path):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    (pack / "requeue-policy.yaml").unlink()
    rs = load_rules(pack)
    assert policy_problems(rs) == [] and load_requeue_policy(rs) is None


def test_a_gpu_off_the_bus_requeues_the_job_without_its_node(policy, docs):
    d = decide(policy, _bus(docs), NOW, Counts(), LIVE)
    assert (d.decision, d.exclude, d.exc_node_list) == ("requeue", ("hx-gpu019",), "hx-gpu019")
    assert d.cause == "gpu_fallen_off_bus@hx-gpu019/0000:9d:00"


def test_the_jobs_own_exclusions_are_kept(policy, docs):
    d = decide(policy, _bus(docs), NOW, Counts(), {**LIVE, "ExcNodeList": "hx-gpu[001-002]", "JobState": "FAILED"})
    assert d.decision == "requeue" and d.exc_node_list == "hx-gpu[001-002,019]"


def test_a_plan_decides_without_asking_slurm(policy, docs):
    d = decide(policy, _bus(docs), NOW, Counts())
    assert d.decision == "requeue" and d.exc_node_list is None


@pytest.mark.parametrize("live,why", [
    ({**LIVE, "Requeue": "0"}, "does not allow requeue (Requeue=0"),
    ({**LIVE, "BatchFlag": "0"}, "not a batch job"),
    ({**LIVE, "JobState": "PENDING"}, "the job is PENDING now"),  # Slurm requeued it itself
    ({**LIVE, "JobState": "CANCELLED"}, "the job is CANCELLED now"),
    ({}, "Slurm no longer knows the job"),
])
def test_what_slurm_says_of_the_job_can_stop_the_requeue(policy, docs, live, why):
    d = decide(policy, _bus(docs), NOW, Counts(), live)
    assert d.decision == "skipped" and why in d.detail


def test_the_same_cause_of_the_same_job_is_never_requeued_twice(policy, docs):
    d = decide(policy, _bus(docs), NOW, Counts(job=1, same_cause_at=NOW - timedelta(minutes=3)), LIVE)
    assert d.decision == "skipped" and d.detail.startswith("already requeued for this cause at 2026-03-10 09:37")


@pytest.mark.parametrize("counts,cap", [
    (Counts(job=2), "of one job; 2 made"),
    (Counts(user_last_hour=10), "of one user's jobs per hour"),
    (Counts(cluster_last_hour=30), "per hour on the cluster"),
])
def test_the_caps(policy, docs, counts, cap):
    d = decide(policy, _bus(docs), NOW, counts, LIVE)
    assert d.decision == "capped" and cap in d.detail


def test_a_node_failure_of_a_job_slurm_did_not_requeue_is_requeued_without_the_node(policy, docs):
    doc = copy.deepcopy(docs["10-node-fail-no-logs"])
    end = datetime.fromisoformat(doc["job"]["end"].replace("Z", "+00:00"))
    d = decide(policy, doc, end + timedelta(minutes=2), Counts(), {**LIVE, "JobState": "NODE_FAIL"})
    assert d.decision == "requeue" and d.exclude == ("qk0102",)


@pytest.mark.parametrize("change,why", [
    (lambda d: d["job"].update(state="CANCELLED"), "the run ended CANCELLED"),
    (lambda d: d["culprits"][0].update(evidence="job_output"), "named only by the output of the job"),
    (lambda d: d.update(confidence="low"), "confidence low is below medium"),
    (lambda d: d.update(culprits=[{"node": f"n{i}", "evidence": "system"} for i in range(5)]), "5 culprit nodes"),
    (lambda d: d.update(culprits=[]), "no culprit node"),
    (lambda d: d["culprits"][0].update(node="n1;reboot"), "not a valid Slurm node name"),
])
def test_what_makes_a_failure_no_candidate(policy, docs, change, why):
    doc = _bus(docs)
    change(doc)
    d = decide(policy, doc, NOW, Counts(), LIVE)
    assert d.decision == "none" and why in d.detail


def test_the_jobs_own_failure_is_no_candidate(policy, docs):
    d = decide(policy, docs["07-app-python-keyerror"], NOW, Counts(), LIVE)
    assert d.decision == "none" and "outcome application" in d.detail


def test_a_run_that_ended_long_ago_is_left_alone(policy, docs):
    d = decide(policy, _bus(docs), NOW + timedelta(hours=1), Counts(), LIVE)
    assert d.decision == "skipped" and "more than 30 minutes ago" in d.detail


def test_excluded_with_adds_to_a_hostlist():
    assert excluded_with("(null)", ["node1"]) == "node1"
    assert excluded_with("gpu[01-03]", ["gpu04", "gpu02"]) == "gpu[01-04]"
