"""A node's life: its boots, drains and resumes, from what a job's evidence shows and what Slurm says. Pure.

A one-shot drain condition counts only the evidence from after the node's last reboot or resume (docs/drain.md):
an operator who rebooted the node, or resumed it with Slurm's own tools, handled what came before. The store keeps
the changes (store.node_life); this module finds them:
- in a job's evidence (`from_evidence`): the kernel's banner, an event of a kind whose spec says `life: boot`
  (rules/kinds.yaml), placed in time by its own line; and the context's boot_time (a node's prolog and epilog read
  it from the kernel). Only system-written evidence: a job's output never makes a boot record.
- in two successive views of one node by Slurm (`from_slurm`): a new BootTime is a boot, a DRAIN (or FAIL) set is
  a drain (who set it and when, from Slurm's reason), a DRAIN lifted is a resume (`State=RESUME`, UNDRAIN, a
  RebootProgram's or NHC's), a DOWN is recorded but is no resume when it ends (a node that stops answering and
  comes back by itself was not repaired; one that rebooted has a new BootTime).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from attribution.drain.policy import NodeState
from attribution.model import Event, ExecutionContext
from attribution.rulepack.values import RuleSet

#: Two boot times of one node closer than this are one boot (Slurm's BootTime and /proc/stat's btime are the
#: current time minus the uptime, read at different moments; the kernel banner is stamped by the journal).
SAME_BOOT = timedelta(minutes=2)
#: The changes that end what came before them, for the one-shot conditions (drain_conditions_at's `resets`).
RESETS = ("boot", "resume")


@dataclass(frozen=True)
class LifeChange:
    node: str
    at: datetime
    what: str  # boot | resume | drain | down
    source: str  # kernel | context | slurm | attribution
    actor: str | None = None
    detail: str | None = None


def from_evidence(ruleset: RuleSet, ctx: ExecutionContext, *groups: list[Event]) -> tuple:
    """(the boots a job's evidence shows, then each group of events without them). An event of a `life` kind is a
    boot only when the system wrote it and its line placed it in time; either way it is kept as no event (a boot is
    no fault: the fleet's rollups and views count none). The context's boot_time of each of the job's nodes is a
    boot too."""
    life = {name: spec.life for name, spec in ruleset.kinds.items() if spec.life}
    changes: list[LifeChange] = []
    rest: list[list[Event]] = []
    for events in groups:
        if not any(e.kind in life for e in events):  # nearly always: a storm's 10,000 events pass as they are
            rest.append(events)
            continue
        kept = []
        for e in events:
            if e.kind not in life:
                kept.append(e)
            elif e.evidence == "system" and e.time is not None and e.node:
                release = e.fields.get("release")
                changes.append(LifeChange(e.node, e.time, life[e.kind], "kernel", None,
                                          f"{e.location}: Linux {release}" if release else e.location))
        rest.append(kept)
    for node, booted in sorted(ctx.boot_time.items()):
        if node in ctx.nodes:
            changes.append(LifeChange(node, booted, "boot", "context", None, f"boot_time of job {ctx.job_id}"))
    return (changes, *rest)


def flags(state: str) -> set[str]:
    """Slurm's state words (`IDLE+DRAIN`, `DOWN*+DRAIN`, `MIXED+DRAIN+REBOOT_REQUESTED`) as a set, without the
    `*` (not responding) and `~` (powered off) marks."""
    return {w.strip().rstrip("*~#!%$@^-").upper() for w in (state or "").split("+") if w.strip()}


def drained(state: str) -> bool:
    f = flags(state)
    return bool(f & {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})


def down(state: str) -> bool:
    return "DOWN" in flags(state)


def from_slurm(before: NodeState | None, before_seen: datetime | None, now: NodeState,
               seen: datetime) -> list[LifeChange]:
    """What changed between two views of one node (`before` None: the first view, whose boot and drain are
    recorded as they are). A resume's time is unknown between the two views: it is put at the earlier one, the
    last time the node was seen drained, so that no fault of after the resume is taken for one before it."""
    out: list[LifeChange] = []
    if now.boot_time is not None and (before is None or before.boot_time is None
                                      or abs(now.boot_time - before.boot_time) > SAME_BOOT):
        out.append(LifeChange(now.name, now.boot_time, "boot", "slurm", None, "Slurm BootTime"))
    was_drained = before is not None and drained(before.state)
    if drained(now.state) and (not was_drained or (now.reason or "") != (before.reason or "")):
        out.append(LifeChange(now.name, now.reason_at or seen, "drain", "slurm", now.reason_user,
                              f"{now.state}: {now.reason}" if now.reason else now.state))
    elif was_drained and not drained(now.state):
        assert before is not None
        since = before_seen or seen
        out.append(LifeChange(now.name, since, "resume", "slurm", None,
                              f"{before.state} lifted between {since:%Y-%m-%d %H:%M:%S}Z and {seen:%Y-%m-%d %H:%M:%S}Z"
                              f" (now {now.state})"))
    if down(now.state) and (before is None or not down(before.state)):
        out.append(LifeChange(now.name, now.reason_at or seen, "down", "slurm", now.reason_user,
                              f"{now.state}: {now.reason}" if now.reason else now.state))
    return out
