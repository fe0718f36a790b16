"""The job owner's line (act/notice.py): a verdict in one line for the job's AdminComment, from names only.

The expected lines follow what happened in each incident (tests/incidents/*/expected.yaml and its notes): the GPU
that fell off the bus and its node, the node that failed, the job that timed out with no fault, the job's own
Python exception."""

from __future__ import annotations

import copy

import pytest

from attribution.act.notice import MAX_CHARS, owner_line
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict

from tests.conftest import INCIDENTS


@pytest.fixture(scope="module")
def docs(ruleset):
    return {name: verdict_to_dict(diagnose_bundle(ruleset, INCIDENTS / name).verdict)
            for name in ("01-xid79-fallen-off-bus", "07-app-python-keyerror", "09-slurm-timeout-no-fault",
                         "10-node-fail-no-logs")}


def test_a_gpu_that_fell_off_the_bus_names_the_gpu_its_node_and_says_it_is_not_the_application(docs, ruleset):
    assert owner_line(docs["01-xid79-fallen-off-bus"], ruleset.kinds) == (
        "attribution: gpu_hardware, GPU 0000:9d:00 on hx-gpu019 fell off the PCIe bus (Xid 79); "
        "not the application; resubmit")


def test_a_requeued_job_says_which_nodes_it_runs_without(docs, ruleset):
    line = owner_line(docs["01-xid79-fallen-off-bus"], ruleset.kinds, requeued_without=["hx-gpu019"])
    assert line.endswith("; not the application; requeued without hx-gpu019")


def test_a_node_failure_names_the_node(docs, ruleset):
    # qk0102 lost power; slurmctld ended the job NODE_FAIL with FailedNode=qk0102 (the scheduler's word: a cause)
    assert owner_line(docs["10-node-fail-no-logs"], ruleset.kinds) == (
        "attribution: host, qk0102 failed (Slurm NODE_FAIL); not the application; resubmit")


def test_a_timeout_with_no_fault_is_the_schedulers(docs, ruleset):
    assert owner_line(docs["09-slurm-timeout-no-fault"], ruleset.kinds) == (
        "attribution: scheduler, ended by the scheduler (TIMEOUT); no fault found; resubmit")


def test_the_jobs_own_exception_says_so_without_its_message(docs, ruleset):
    doc = docs["07-app-python-keyerror"]
    line = owner_line(doc, ruleset.kinds)
    assert line.startswith("attribution: application, ") and "raised a Python exception" in line
    assert line.endswith("; the code or configuration of the job; see its output")
    # the job's own words (its exception's message, its output lines) never reach the comment
    written = [doc["root_cause"]["line"], doc["explanation"]] + [s.get("line") or "" for s in doc["symptoms"]]
    assert "KeyError" in doc["root_cause"]["line"] and "KeyError" not in line
    assert not any(w and w in line for w in written)


def test_a_job_that_did_not_fail_gets_no_line(docs, ruleset):
    doc = copy.deepcopy(docs["01-xid79-fallen-off-bus"])
    doc["outcome"] = "none"
    assert owner_line(doc, ruleset.kinds) is None


def test_a_culprit_named_only_by_the_jobs_output_is_said_so(docs, ruleset):
    doc = copy.deepcopy(docs["01-xid79-fallen-off-bus"])
    doc["root_cause"]["evidence"] = "job_output"
    doc["confidence"] = "medium"
    line = owner_line(doc, ruleset.kinds)
    assert line.startswith("attribution: gpu_hardware (medium confidence), GPU 0000:9d:00 on hx-gpu019 ")
    assert "(named only by the output of the job)" in line


def test_the_line_is_bounded_and_holds_no_quote_or_control_character(docs, ruleset):
    doc = copy.deepcopy(docs["01-xid79-fallen-off-bus"])
    doc["root_cause"]["node"] = "n'\"\x1b[31m" + "x" * 2000
    doc["root_cause"]["kind"] = "a_kind_of_another_pack"
    line = owner_line(doc, ruleset.kinds)
    assert len(line) <= MAX_CHARS and line.endswith("...; not the application; resubmit")
    assert "'" not in line and '"' not in line and "\x1b" not in line
    assert line.isascii() and line.isprintable()
