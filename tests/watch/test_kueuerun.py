"""watch/kueuerun.py: a run whose pods are already gone is still attributed where the Workload says where it ran
(a Topology-Aware Scheduling assignment), with the pods' logs marked missing in coverage; without any placement it
is marked stored without a verdict, and says why."""

from __future__ import annotations

import json
import time

from attribution.collect.kubeapi import KubeApi
from attribution.config import ConnectorSettings, KubernetesSettings, LokiSettings
from attribution.store.kueuewatch import attempts_of
from attribution.watch.kueuerun import UidLocks, diagnose_run, store_run
from attribution.watch.runs import run_end

from tests.harness import kueueday as day
from tests.harness.kubeapi import FakeKubeApi
from tests.harness.loki import FakeLoki


def test_pods_deleted_the_gpu_fault_still_found_through_the_topology_assignment_and_loki(ruleset):
    doc = json.loads((day.GPT / "workload.json").read_text())
    with FakeKubeApi() as api, FakeLoki() as loki:
        for labels, entries in day.loki_streams():
            loki.add_stream(labels, entries)
        c = ConnectorSettings(loki=LokiSettings(url=loki.url), kubernetes=KubernetesSettings(api_server=api.url))
        with KubeApi(c.kubernetes) as client:
            d = diagnose_run(ruleset, c, client, "helios", doc, "ml-train/pytorchjob-gpt13b-7f3c2",
                             time.monotonic() + 60)
    assert (d.verdict.outcome, [n for n, _ in d.verdict.culprits]) == ("gpu_hardware", ["hx-gpu019"])
    pods = [x for x in d.coverage if x.source == "job" and "pods of the workload" in (x.reason or "")]
    assert [(x.status, "deleted" in x.reason) for x in pods] == [("missing", True)]
    assert {x.node for x in d.coverage if x.source == "scheduler" and x.status == "missing"} == {
        "hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020"}  # the nodes too are unknown to this API server


def test_without_pods_or_placement_the_run_is_marked_with_why(ruleset, store):
    doc = day._finished(day.TOKENIZER, "2026-03-10T06:12:46Z", "Failed", "Job failed")
    with FakeKubeApi() as api:
        c = ConnectorSettings(kubernetes=KubernetesSettings(api_server=api.url))
        with KubeApi(c.kubernetes) as client:
            s = store_run(ruleset, store, c, client, "helios", doc, run_end(doc), UidLocks(), 60)
    assert s.outcome is None and "no node placement" in s.problem
    assert [(a["job_id"], a["outcome"]) for a in attempts_of(store, "helios")] == [("team-a/job-tokenizer-4b7e1", None)]
