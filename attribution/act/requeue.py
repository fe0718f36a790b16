"""Requeueing a failed job around its culprit nodes: the policy as data (rules/requeue-policy.yaml), its checks,
and the decision for one job. Pure.

A job is a candidate when its verdict is an infrastructure outcome of the policy with the confidence it asks for,
the run ended in one of its states not long ago, and its culprits are named by system-written evidence (never by
the job's own output: docs/verdict.md "Evidence a user could have written"), no more of them than the policy
allows. What Slurm says of the job now decides the rest: it must allow requeue (`Requeue=1`: sbatch --requeue or
the cluster's JobRequeue), be a batch job, and still be the run the verdict is about (COMPLETING or ended: a job
Slurm requeued itself, after a node failure or a preemption, is pending or running again and is left alone).
Never twice for the same cause of the same job, and within the caps: per job, per user and per cluster in an hour.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from attribution.errors import PolicyError, Problem, TimeError
from attribution.frozen import Value
from attribution.model import INFRASTRUCTURE_OUTCOMES
from attribution.timeparse import parse_iso

CONFIDENCE = {"low": 0, "medium": 1, "high": 2}
#: the live states in which the run the verdict is about is over and still the job's last
OVER = ("COMPLETING",)


class RequeuePolicy(Value):
    """The requeue policy (rules/requeue-policy.yaml): which verdicts requeue a job, and the caps."""

    version: str
    outcomes: tuple
    job_states: tuple
    min_confidence: str
    max_age_minutes: int
    max_excluded_nodes: int
    max_per_job: int
    max_per_user_per_hour: int
    max_per_hour: int


def policy_problems(ruleset) -> list[Problem]:
    """What is wrong with the pack's requeue policy beyond its schema (none when the pack has no such file)."""
    docs = ruleset.document("requeue_policy")
    if len(docs) > 1:
        return [Problem(ruleset.root, None, f"expected at most one requeue policy file (type: requeue_policy), "
                                            f"found {len(docs)}")]
    problems = []
    for origin, doc in docs:
        for o in doc["outcomes"]:
            if o not in INFRASTRUCTURE_OUTCOMES:
                problems.append(Problem(origin, None, f"outcome {o!r} is not an infrastructure outcome: only a "
                                                      f"job that failed on the infrastructure is requeued"))
    return problems


def load_requeue_policy(ruleset) -> RequeuePolicy | None:
    """The pack's requeue policy; None when the pack has none. PolicyError when `policy_problems` finds any."""
    problems = policy_problems(ruleset)
    if problems:
        raise PolicyError(problems)
    docs = ruleset.document("requeue_policy")
    if not docs:
        return None
    doc = docs[0][1]
    caps = doc["caps"]
    return RequeuePolicy(version=hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16],
                         outcomes=tuple(doc["outcomes"]), job_states=tuple(doc["job_states"]),
                         min_confidence=doc["min_confidence"], max_age_minutes=int(doc["max_age_minutes"]),
                         max_excluded_nodes=int(doc["max_excluded_nodes"]), max_per_job=int(caps["max_per_job"]),
                         max_per_user_per_hour=int(caps["max_per_user_per_hour"]),
                         max_per_hour=int(caps["max_per_hour"]))


@dataclass(frozen=True)
class Counts:
    """What the audit says (store.jobactions.counts): requeues by attribution of this job id, of its user and of
    its cluster in the last hour, and when this cause of this job was requeued already (None: never)."""

    job: int = 0
    user_last_hour: int = 0
    cluster_last_hour: int = 0
    same_cause_at: datetime | None = None


@dataclass(frozen=True)
class RequeueDecision:
    decision: str  # requeue | skipped | capped | none (not a candidate: nothing is recorded)
    detail: str
    cause: str | None = None  # the cause's key: root kind @ node / gpu
    exclude: tuple = ()  # the culprit nodes the job is requeued without
    exc_node_list: str | None = None  # ExcNodeList to set: the job's own with the culprits added

    @property
    def candidate(self) -> bool:
        return self.decision != "none"


def cause_key(doc: Mapping[str, Any]) -> str:
    """The cause of a verdict, as requeues are counted by: its root's kind, node and GPU (or its culprits)."""
    root = doc.get("root_cause") or None
    if root:
        return f"{root.get('kind')}@{root.get('node') or ''}" + (f"/{root['gpu']}" if root.get("gpu") else "")
    return f"{doc.get('outcome')}@{','.join(sorted(c['node'] for c in doc.get('culprits') or []))}"


def candidate(policy: RequeuePolicy, doc: Mapping[str, Any], now: datetime) -> RequeueDecision:
    """Whether the verdict `doc` makes its job a candidate, from the verdict alone (decision `skipped` when it
    is one that something else stops, `none` when it is not one)."""
    from attribution.drain.policy import valid_node_name

    outcome, job = doc.get("outcome"), doc.get("job") or {}
    if outcome not in policy.outcomes:
        return RequeueDecision("none", f"outcome {outcome} is not one the policy requeues")
    culprits = [c for c in doc.get("culprits") or [] if c.get("node")]
    if not culprits:
        return RequeueDecision("none", "no culprit node is named")
    nodes = tuple(sorted({c["node"] for c in culprits}))
    cause = cause_key(doc)
    if any(c.get("evidence") == "job_output" for c in culprits):
        return RequeueDecision("none", "a culprit is named only by the output of the job", cause, nodes)
    if CONFIDENCE.get(doc.get("confidence"), 0) < CONFIDENCE[policy.min_confidence]:
        return RequeueDecision("none", f"confidence {doc.get('confidence')} is below {policy.min_confidence}",
                               cause, nodes)
    if job.get("state") not in policy.job_states:
        return RequeueDecision("none", f"the run ended {job.get('state')}, not {'/'.join(policy.job_states)}",
                               cause, nodes)
    if len(nodes) > policy.max_excluded_nodes:
        return RequeueDecision("none", f"{len(nodes)} culprit nodes, more than the {policy.max_excluded_nodes} the "
                                       f"policy excludes", cause, nodes)
    bad = [n for n in nodes if not valid_node_name(n)]
    if bad:
        return RequeueDecision("none", f"{bad[0]!r} is not a valid Slurm node name", cause, nodes)
    end = _time(job.get("end"))
    if end is not None and now - end > timedelta(minutes=policy.max_age_minutes):
        return RequeueDecision("skipped", f"the run ended more than {policy.max_age_minutes} minutes ago",
                               cause, nodes)
    return RequeueDecision("requeue", "policy met", cause, nodes)


def decide(policy: RequeuePolicy, doc: Mapping[str, Any], now: datetime, counts: Counts,
           live: Mapping[str, str] | None = None) -> RequeueDecision:
    """What to do with the job of the verdict `doc`: requeue, skip (and why) or cap (which cap), given the audit's
    `counts` and what Slurm says of the job now (`live`: `scontrol show job`; None: not asked, as in a plan).
    When it is requeue and `live` was given, `exc_node_list` is the job's ExcNodeList with the culprits added."""
    d = candidate(policy, doc, now)
    if d.decision != "requeue":
        return d

    def why(decision: str, detail: str) -> RequeueDecision:
        return RequeueDecision(decision, detail, d.cause, d.exclude)

    if counts.same_cause_at is not None:
        return why("skipped", f"already requeued for this cause at {counts.same_cause_at:%Y-%m-%d %H:%M:%S}Z")
    if counts.job >= policy.max_per_job:
        return why("capped", f"cap: at most {policy.max_per_job} requeue(s) of one job; {counts.job} made")
    if counts.user_last_hour >= policy.max_per_user_per_hour:
        return why("capped", f"cap: at most {policy.max_per_user_per_hour} requeues of one user's jobs per hour; "
                             f"{counts.user_last_hour} in the last hour")
    if counts.cluster_last_hour >= policy.max_per_hour:
        return why("capped", f"cap: at most {policy.max_per_hour} requeues per hour on the cluster; "
                             f"{counts.cluster_last_hour} in the last hour")
    if live is None:
        return d
    if not live:
        return why("skipped", "Slurm no longer knows the job (it ended longer ago than MinJobAge)")
    if live.get("Requeue") != "1":
        return why("skipped", "the job does not allow requeue (Requeue=0: sbatch --requeue or JobRequeue=1)")
    if live.get("BatchFlag") == "0":
        return why("skipped", "not a batch job: Slurm requeues batch jobs only")
    state = (live.get("JobState") or "").split("+")[0]
    if state not in OVER and state not in policy.job_states:
        return why("skipped", f"the job is {state or 'in no known state'} now: not the run the verdict is about")
    return RequeueDecision("requeue", "policy met", d.cause, d.exclude, excluded_with(live.get("ExcNodeList"),
                                                                                    d.exclude))


def excluded_with(current: str | None, nodes) -> str:
    """The hostlist of the job's ExcNodeList (`(null)` when it has none) with `nodes` added."""
    import hostlist

    have = [] if current in (None, "", "(null)") else hostlist.expand_hostlist(current)
    return hostlist.collect_hostlist(sorted(set(have) | set(nodes)))


def _time(value) -> datetime | None:
    try:
        return parse_iso(value) if value else None
    except (TimeError, ValueError):
        return None


__all__ = ["RequeuePolicy", "RequeueDecision", "Counts", "policy_problems", "load_requeue_policy", "cause_key",
           "candidate", "decide", "excluded_with"]
