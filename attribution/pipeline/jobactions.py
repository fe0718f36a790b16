"""jobactions: what a job's verdict makes attribution do in Slurm, when the configuration asks for it
(`job_actions:`, docs/job-actions.md): tell the job's owner in its AdminComment, requeue it around its culprits.

`act_on_job` is what the controller's epilog (storing into the database) and the service (once it attributed a
job) call; `requeue_plan` and `requeue_apply` are `attribution requeue`; `job_plan` is the job page's section.
Every Slurm refusal is audited (store.jobactions) and said in the returned words, never raised: the epilog and the
service go on.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Mapping

UTC = timezone.utc
#: the live states of a job that runs again (requeued by Slurm or someone): its earlier run is left alone
AGAIN = ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING")


def act_on_job(ruleset, engine, settings, slurm, cluster: str, job_id: str, start: datetime | None = None,
               info: Mapping[str, str] | None = None, actor: str | None = None,
               now: datetime | None = None) -> list[str]:
    """Tell the job's owner its verdict (AdminComment) and requeue it around its culprits, as `settings`
    (config.JobActionSettings) asks, through `slurm` (act.slurmjob.SlurmJobs). `start`: the stored job's start
    (None: the newest job of the id); `info`: `scontrol show job` of the job when the caller has it (the
    controller's hook), else it is asked. Returns what was done, for the caller's log."""
    from attribution.act.notice import owner_line
    from attribution.act.requeue import candidate, load_requeue_policy
    from attribution.store import jobactions as sj
    from attribution.store.reads import current_verdict

    if not (settings.admin_comment or settings.requeue):
        return []
    now = now or datetime.now(UTC)
    with engine.connect() as c:
        doc = current_verdict(c, cluster, job_id, start)
        if doc is None or doc.get("outcome") in (None, "none"):
            return []
        start = run_start(doc)  # a requeued job's runs are one stored job: its verdict's context is the last run's
        told = sj.last_comment(c, cluster, job_id, start)
    words: list[str] = []
    policy = load_requeue_policy(ruleset) if settings.requeue else None
    if settings.requeue and policy is None:
        words.append("no requeue policy in the rule pack")
    may_requeue = policy is not None and candidate(policy, doc, now).candidate
    line = owner_line(doc, ruleset.kinds)
    if not may_requeue and not (settings.admin_comment and line and line != told):
        return words  # nothing to do: Slurm is not asked
    live = dict(info) if info is not None else slurm.show(job_id)
    if _state(live) in AGAIN:
        return words + [f"the job is {_state(live)} again: its earlier run is left alone"]
    decision = action_id = None
    if may_requeue:
        decision, action_id = _decide(engine, policy, doc, cluster, job_id, start, live, actor, now)
        if action_id is None:
            words.append(f"requeue {decision.decision}: {decision.detail}")
    words += _requeue_and_tell(ruleset, engine, settings.admin_comment, slurm, cluster, job_id, start, doc,
                               decision if action_id is not None else None, action_id, told, actor)
    return words


def _decide(engine, policy, doc, cluster, job_id, start, live, actor, now, dry_run: bool = False):
    from attribution.act.requeue import cause_key, decide
    from attribution.store.jobactions import decide_and_record

    user = (doc.get("job") or {}).get("user")
    return decide_and_record(engine, cluster, job_id, start, user, cause_key(doc),
                             lambda counts: decide(policy, doc, now, counts, live), policy.version, actor, now,
                             dry_run=dry_run)


def _requeue_and_tell(ruleset, engine, comment_on: bool, slurm, cluster, job_id, start, doc, decision, action_id,
                      told, actor) -> list[str]:
    """The comment on the ended run's record, then the requeue (its pending job's comment with it): the comment
    first, since sacctmgr changes the job id's newest record and a requeue makes a new one."""
    from attribution.act.notice import owner_line
    from attribution.drain.slurmctl import SlurmError
    from attribution.store import jobactions as sj

    words = []
    line = owner_line(doc, ruleset.kinds, requeued_without=decision.exclude if decision else ())
    user = (doc.get("job") or {}).get("user")

    def tell(text: str) -> None:
        try:
            how = slurm.set_admin_comment(job_id, text)
            word, detail = "applied", text
            words.append(f"AdminComment set ({how})")
        except SlurmError as exc:
            word, detail = "failed", f"{exc}"[:500]
            words.append(f"AdminComment not set: {exc}")
        with engine.begin() as c:
            sj.record(c, cluster, job_id, start, "admin_comment", word, detail, user, actor=actor)

    if comment_on and line and line != told:
        tell(line)
    if decision is not None:
        try:
            slurm.requeue_excluding(job_id, decision.exc_node_list, decision.exclude,
                                    line if comment_on else None)
            words.append(f"requeued without {','.join(decision.exclude)}")
        except SlurmError as exc:
            sj.outcome(engine, job_id, action_id, "failed", f"{exc}"[:500])
            words.append(f"requeue failed: {exc}")
            plain = owner_line(doc, ruleset.kinds)
            if comment_on and plain and plain != line:
                tell(plain)  # the record said requeued: it was not
    return words


def run_start(doc: Mapping) -> datetime | None:
    """The start of the run a verdict is about (its job's context): what the audit keys a run's comment by."""
    from attribution.errors import TimeError
    from attribution.timeparse import parse_iso

    try:
        return parse_iso((doc.get("job") or {}).get("start") or "")
    except (TimeError, ValueError):
        return None


def _state(live: Mapping[str, str]) -> str:
    return (live.get("JobState") or "").split("+")[0]


def requeue_plan(ruleset, engine, cluster: str | None = None, now: datetime | None = None) -> list[tuple]:
    """The jobs the requeue policy would requeue now, from the store alone (Slurm is asked at apply): (cluster,
    job id, start, verdict document, act.requeue.RequeueDecision) of every candidate, decided on the audit's
    counts. InputError when the rule pack has no requeue policy."""
    from attribution.act.requeue import cause_key, decide
    from attribution.store import jobactions as sj

    policy = _policy(ruleset)
    now = now or datetime.now(UTC)
    out = []
    for cl, job_id, _, doc in sj.recent_failures(engine, now - timedelta(minutes=policy.max_age_minutes),
                                                     policy.outcomes, cluster):
        with engine.connect() as c:
            counts = sj.counts(c, cl, job_id, (doc.get("job") or {}).get("user"), cause_key(doc), now)
        d = decide(policy, doc, now, counts)
        if d.candidate:
            out.append((cl, job_id, run_start(doc), doc, d))
    return out


def requeue_apply(ruleset, engine, slurm, cluster: str, comment_on: bool, actor: str | None,
                  dry_run: bool = False, now: datetime | None = None) -> list[tuple]:
    """Requeue the plan's jobs of `cluster` that Slurm lets requeue, within the caps, each decided again on what
    Slurm says of it now; every decision audited unless `dry_run`. (job id, word, detail, decision) per job."""
    from attribution.store.jobactions import last_comment

    now = now or datetime.now(UTC)
    policy = _policy(ruleset)
    rows = []
    for cl, job_id, start, doc, planned in requeue_plan(ruleset, engine, cluster, now):
        live = slurm.show(job_id) if planned.decision == "requeue" else None  # a skip or a cap needs no Slurm
        d, action_id = _decide(engine, policy, doc, cl, job_id, start, live, actor, now, dry_run=dry_run)
        if d.decision != "requeue":
            rows.append((job_id, d.decision, d.detail, d))
        elif dry_run:
            rows.append((job_id, "would requeue", f"dry run: ExcNodeList={d.exc_node_list}", d))
        else:
            with engine.connect() as c:
                told = last_comment(c, cl, job_id, start)
            words = _requeue_and_tell(ruleset, engine, comment_on, slurm, cl, job_id, start, doc, d, action_id,
                                      told, actor)
            failed = [w for w in words if w.startswith("requeue failed")]
            rows.append((job_id, "failed" if failed else "requeued", "; ".join(words), d))
    return rows


def job_plan(ruleset, conn, cluster: str, job_id: str, doc: Mapping, now: datetime | None = None) -> dict:
    """The job page's section: the owner's line, what the requeue policy says of the job from the store alone,
    and what was done (the audit of the job id's runs)."""
    from attribution.act.notice import owner_line
    from attribution.act.requeue import cause_key, decide, load_requeue_policy
    from attribution.store import jobactions as sj

    now = now or datetime.now(UTC)
    policy = load_requeue_policy(ruleset)
    plan = None
    if policy is not None:
        d = decide(policy, doc, now, sj.counts(conn, cluster, job_id, (doc.get("job") or {}).get("user"),
                                               cause_key(doc), now))
        plan = {"decision": d.decision, "detail": d.detail, "exclude": list(d.exclude)}
    return {"line": owner_line(doc, ruleset.kinds), "requeue": plan, "actions": sj.job_actions(conn, cluster, job_id)}


def _policy(ruleset):
    from attribution.act.requeue import load_requeue_policy
    from attribution.errors import InputError

    policy = load_requeue_policy(ruleset)
    if policy is None:
        raise InputError(ruleset.root, "no requeue policy in the rule pack (type: requeue_policy)")
    return policy


def after_epilog(ruleset, settings, engine_factory, doc: Mapping, info: Mapping[str, str] | None,
                 deadline: float | None) -> list[str]:
    """The controller's epilog, once its report of the job is stored in the database (not when it reports to
    the service: the service acts there): `act_on_job` within the hook's remaining time, with the `scontrol show
    job` the hook read. Its words for the hook's log line; whatever fails is one of them (a hook never fails)."""
    import time

    from attribution.act.slurmjob import from_settings

    ja = settings.job_actions
    if not (ja.admin_comment or ja.requeue):
        return []
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and remaining < 1:
        return ["job actions skipped: no time left"]
    ctx = doc.get("context") or {}
    t0 = time.monotonic()
    try:  # at most six Slurm calls: a comment (scontrol, sacctmgr), a requeue (hold, update, release)
        with engine_factory() as engine:
            words = act_on_job(ruleset, engine, ja, from_settings(ja, None if remaining is None else remaining / 6),
                               str(doc.get("cluster")), str(ctx.get("job_id")), info=info, actor="epilog")
    except Exception as exc:  # the database went away, a fault of ours: the job is stored, the hook goes on
        return [f"job actions failed: {type(exc).__name__}: {exc}"]
    return words + [f"job actions {time.monotonic() - t0:.3f}s"] if words else []
