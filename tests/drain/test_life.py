"""attribution/drain/life.py: a node's boots, drains and resumes from a job's evidence and from two views of Slurm."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from attribution import frozen
from attribution.drain.life import LifeChange, drained, flags, from_evidence, from_slurm
from attribution.drain.policy import NodeState
from attribution.pipeline.rulecheck import events_for_line
from attribution.scope.bundle import parse_context

UTC = timezone.utc
T = datetime(2026, 3, 10, 11, 0, 0, tzinfo=UTC)
BANNER = ("Mar 10 11:00:00 g05 kernel: Linux version 6.8.0-57-generic (buildd@lcy02-amd64-120) "
          "(x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
          "#65~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Fri Jan 10 15:21:56 UTC 2025")
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _ctx(**extra):
    doc = {"cluster": "life", "job_id": "502", "nodes": ["g05"], "state": "COMPLETED",
           "start": "2026-03-10T12:00:00Z", "end": "2026-03-10T14:00:00Z", **extra}
    return parse_context(str(doc).replace("'", '"'))


def _placed(ev, **changes):
    return frozen.replace(ev, node="g05", **changes)


def test_the_kernel_banner_is_a_boot_at_its_time_and_no_event(ruleset):
    banner = _placed(events_for_line(ruleset, "kernel", BANNER)[0], time=T, location="nodes/g05/kernel.log:115")
    fault = _placed(events_for_line(ruleset, "kernel", XID79)[0], time=T - timedelta(hours=9))
    changes, inside, outside = from_evidence(ruleset, _ctx(), [fault], [banner])
    assert changes == [LifeChange("g05", T, "boot", "kernel", None,
                                  "nodes/g05/kernel.log:115: Linux 6.8.0-57-generic")]
    assert inside == [fault] and outside == []


def test_a_banner_without_a_time_or_from_job_output_is_no_boot(ruleset):
    banner = _placed(events_for_line(ruleset, "kernel", BANNER)[0], time=None)
    forged = frozen.replace(banner, time=T, source="job")  # a report claiming the job's output booted the node
    changes, kept = from_evidence(ruleset, _ctx(), [banner, forged])
    assert changes == [] and kept == []
    # and a job printing the banner (cat /proc/version) has no rule that reads it at all
    assert events_for_line(ruleset, "job", BANNER.split("kernel: ", 1)[1]) == []


def test_the_contexts_boot_time_is_a_boot_of_its_node(ruleset):
    ctx = _ctx(boot_time={"g05": "2026-03-10T11:00:02Z", "elsewhere": "2026-03-01T00:00:00Z"})
    changes, kept = from_evidence(ruleset, ctx, [])
    assert changes == [LifeChange("g05", T + timedelta(seconds=2), "boot", "context", None, "boot_time of job 502")]


BOOT = datetime(2026, 3, 9, 8, 0, 0, tzinfo=UTC)


def _view(state, reason=None, user=None, at=None, boot=BOOT):
    return NodeState("g06", state, reason, user, at, boot, boot + timedelta(seconds=40))


def test_slurm_state_words():
    assert flags("DOWN*+DRAIN") == {"DOWN", "DRAIN"} and drained("MIXED+DRAIN") and drained("IDLE+DRAIN")
    assert not drained("IDLE") and not drained("DOWN*") and drained("IDLE+FAIL")


def test_the_first_view_records_the_boot_and_a_drain_with_who_and_when():
    seen = datetime(2026, 3, 10, 4, 0, tzinfo=UTC)
    at = datetime(2026, 3, 10, 3, 0, tzinfo=UTC)
    out = from_slurm(None, None, _view("IDLE+DRAIN", "gpu 3 lost", "root", at), seen)
    assert out == [LifeChange("g06", BOOT, "boot", "slurm", None, "Slurm BootTime"),
                   LifeChange("g06", at, "drain", "slurm", "root", "IDLE+DRAIN: gpu 3 lost")]


def test_a_drain_lifted_is_a_resume_at_the_last_view_that_saw_it_drained():
    s1, s2 = datetime(2026, 3, 10, 4, 0, tzinfo=UTC), datetime(2026, 3, 10, 6, 0, tzinfo=UTC)
    out = from_slurm(_view("IDLE+DRAIN", "gpu 3 lost", "root", s1), s1, _view("IDLE"), s2)
    assert [(c.what, c.at, c.source) for c in out] == [("resume", s1, "slurm")]
    assert "between 2026-03-10 04:00:00Z and 2026-03-10 06:00:00Z" in out[0].detail


def test_boot_time_jitter_is_the_same_boot_a_new_boot_time_is_a_reboot():
    s1, s2 = datetime(2026, 3, 10, 4, 0, tzinfo=UTC), datetime(2026, 3, 10, 6, 0, tzinfo=UTC)
    assert from_slurm(_view("IDLE"), s1, _view("IDLE", boot=BOOT + timedelta(seconds=1)), s2) == []
    rebooted = BOOT + timedelta(days=1, hours=3)
    out = from_slurm(_view("IDLE+DRAIN", "Reboot ASAP", "root", s1), s1, _view("IDLE", boot=rebooted), s2)
    assert [(c.what, c.at) for c in out] == [("boot", rebooted), ("resume", s1)]


def test_a_node_that_stopped_answering_and_came_back_by_itself_was_not_resumed():
    s1, s2, s3 = (datetime(2026, 3, 10, h, 0, tzinfo=UTC) for h in (4, 5, 6))
    went = from_slurm(_view("IDLE"), s1, _view("DOWN*", "Not responding", "slurm", s1), s2)
    assert [(c.what, c.actor) for c in went] == [("down", "slurm")]
    assert from_slurm(_view("DOWN*", "Not responding", "slurm", s1), s2, _view("IDLE"), s3) == []
