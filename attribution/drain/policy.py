"""Deciding which nodes to drain, safely: the policy as data, validation, and the capped decision. Pure.

The candidates come from the `drain_candidates` view (the policy evaluated in SQL over the stored history);
this module decides what to do with them given what Slurm says of each node and the policy's safety caps:
at most a share of a cluster's nodes drained by this tool at once, at most so many drains per hour. Past a
cap it drains nothing more and says why. Node names are validated before any scontrol call.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from attribution.errors import PolicyError, Problem
from attribution.model import INFRASTRUCTURE_OUTCOMES
from attribution.rulepack.values import DrainPolicy, RuleSet

#: Slurm node names: letters, digits, and . _ - (no spaces, quotes, brackets or shell characters).
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: Slurm node states in which a node must not be drained again.
UNAVAILABLE_STATES = ("DRAIN", "DOWN", "FAIL", "MAINT", "REBOOT", "POWER", "FUTURE")


def valid_node_name(name: str) -> bool:
    return bool(NODE_NAME.match(name or ""))


def policy_problems(ruleset: RuleSet) -> list[Problem]:
    """What is wrong with the pack's drain policy beyond its schema: unknown kinds, kinds that must never drain."""
    docs = ruleset.document("drain_policy")
    if len(docs) != 1:
        return [Problem(ruleset.root, None, f"expected exactly one drain policy file (type: drain_policy), "
                                            f"found {len(docs)}")]
    origin, doc = docs[0]
    problems = []
    ids = set()
    for c in doc["conditions"]:
        if c["id"] in ids:
            problems.append(Problem(origin, None, f"condition id {c['id']!r} used twice"))
        ids.add(c["id"])
        for kind in (c.get("recurrence") or c).get("kinds", []):
            spec = ruleset.kinds.get(kind)
            if spec is None:
                problems.append(Problem(origin, None, f"condition {c['id']}: unknown kind {kind!r}"))
            elif spec.role != "cause" or spec.outcome not in INFRASTRUCTURE_OUTCOMES:
                problems.append(Problem(origin, None, f"condition {c['id']}: kind {kind!r} is a {spec.role}"
                                        f"{' of outcome ' + spec.outcome if spec.outcome else ''}; only "
                                        f"infrastructure causes may drain a node"))
    return problems


def load_policy(ruleset: RuleSet) -> DrainPolicy:
    """The pack's drain policy (built when the pack was loaded), once it passes `policy_problems`."""
    problems = policy_problems(ruleset)
    if problems:
        raise PolicyError(problems)
    assert ruleset.drain_policy is not None  # exactly one policy document: policy_problems checked it
    return ruleset.drain_policy


@dataclass(frozen=True)
class Candidate:
    cluster: str
    node: str
    reason: str
    evidence: Any
    score: float


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # Slurm's state words, e.g. IDLE, MIXED+DRAIN, DOWN*
    reason: str | None = None
    reason_user: str | None = None  # who set the reason, and when (`Reason=... [root@2026-12-02T03:15:40]`)
    reason_at: datetime | None = None
    boot_time: datetime | None = None  # Slurm's BootTime and SlurmdStartTime of the node
    slurmd_start: datetime | None = None


@dataclass(frozen=True)
class Decision:
    candidate: Candidate
    decision: str  # apply | skipped | capped
    detail: str


def node_unavailable(state: str) -> bool:
    s = state.upper()
    return any(word in s for word in UNAVAILABLE_STATES)


def decide(candidates: Iterable[Candidate], nodes: Mapping[str, NodeState], policy: DrainPolicy,
           applied_last_hour: int) -> list[Decision]:
    """What to do with each candidate of one cluster: apply, skip (and why) or cap (and which cap)."""
    total = len(nodes)
    ours = sum(1 for n in nodes.values() if node_unavailable(n.state) and (n.reason or "").startswith(
        policy.reason_prefix))
    allowed_total = max(policy.min_nodes_allowed, math.floor(policy.max_fraction_drained * total))
    room_fraction = allowed_total - ours
    room_hour = policy.max_drains_per_hour - applied_last_hour
    out: list[Decision] = []
    applied = 0
    for c in sorted(candidates, key=lambda c: (-c.score, c.node)):
        if not valid_node_name(c.node):
            out.append(Decision(c, "skipped", "node name is not a valid Slurm node name; not passed to scontrol"))
            continue
        n = nodes.get(c.node)
        if n is None:
            out.append(Decision(c, "skipped", "Slurm does not know this node"))
            continue
        if node_unavailable(n.state):
            out.append(Decision(c, "skipped", f"already {n.state}" + (f" ({n.reason})" if n.reason else "")))
            continue
        if applied >= room_fraction:
            out.append(Decision(c, "capped", f"cap: at most {allowed_total} of {total} nodes "
                                             f"({policy.max_fraction_drained:.0%}) drained by attribution at once; "
                                             f"{ours + applied} already are"))
            continue
        if applied >= room_hour:
            out.append(Decision(c, "capped", f"cap: at most {policy.max_drains_per_hour} drains per hour; "
                                             f"{applied_last_hour + applied} in the last hour"))
            continue
        out.append(Decision(c, "apply", "policy met"))
        applied += 1
    return out
