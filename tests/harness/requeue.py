"""Real Slurm clusters for the tests of acting on jobs (tests/act/test_slurmjob.py, tests/api/test_jobactions.py):
accounting on (a finished job's AdminComment is its accounting record's), requeued jobs eligible again after 10 s
instead of 120 (`cred_expire`, docs/job-actions.md), and a wait for what Slurm or the store comes to say."""

from __future__ import annotations

import time


def requeue_cluster(slurm, base_dir, **kwargs):
    """A started SlurmCluster of the ``slurm`` fixture's version, with accounting and cred_expire=10."""
    c = slurm.cluster(base_dir, with_accounting=True, extra_env={"TZ": "UTC"}, **kwargs)
    c.extra_slurm_conf.append(f"AuthInfo=socket={c.munge_socket},cred_expire=10")
    c.install()
    c.start()
    return c


def wait_until(predicate, timeout: float = 60, what: str = ""):
    """The first true value `predicate()` returns within `timeout` seconds (polled twice a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


__all__ = ["requeue_cluster", "wait_until"]
