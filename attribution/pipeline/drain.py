"""drain: the policy over the stored history, decided within the caps, acted on through Slurm."""

from __future__ import annotations


def drain_plan(engine, policy, cluster: str | None = None) -> list:
    """The nodes the policy would drain now (drain candidates, best first), for one cluster or all."""
    from attribution.store import drain as sd

    sd.load_policy(engine, policy)
    return sd.candidates(engine, cluster)


def drain_apply(engine, policy, slurm, cluster: str, actor: str, dry_run: bool = False) -> list[tuple]:
    """Decide on the cluster's candidates within the policy's caps and drain through `slurm` (drain.slurmctl's
    Scontrol); every decision is audited unless `dry_run`. Returns (decision, word, detail) per candidate.

    One run per cluster at a time (a session advisory lock, issue 18 M4), and each drain's audit row is written
    before its scontrol call: a second run started meanwhile waits, then counts the first one's drains against
    the hourly cap."""
    from datetime import datetime, timedelta, timezone

    from attribution.drain.policy import decide
    from attribution.drain.slurmctl import SlurmError
    from attribution.store import drain as sd

    with sd.apply_lock(engine, cluster):
        nodes = slurm.nodes()
        if not dry_run:  # Slurm's view first: a node rebooted or resumed with Slurm's own tools is no candidate
            drain_sync(engine, cluster, nodes)
        cands = drain_plan(engine, policy, cluster)
        recent = sd.applied_since(engine, cluster, datetime.now(timezone.utc) - timedelta(hours=1))
        rows = []
        for d in decide(cands, nodes, policy, recent):
            word, detail = d.decision, d.detail
            if d.decision == "apply":
                if dry_run:
                    word, detail = "would apply", "dry run"
                else:
                    action = sd.record_drain(engine, cluster, d, policy.version, actor)  # audit first
                    try:
                        slurm.drain(d.candidate.node, d.candidate.reason)
                        word = "applied"
                    except SlurmError as exc:
                        word, detail = "failed", str(exc)
                        sd.drain_outcome(engine, action, word, detail)
            rows.append((d, word, detail))
        if not dry_run:  # the drains' own rows are written already
            sd.audit(engine, cluster, [r for r in rows if r[1] not in ("applied", "failed")], policy.version, actor)
        if any(r[1] == "applied" for r in rows):
            try:  # Slurm's view with our drains in it: a resume with Slurm's tools before the next view is seen
                drain_sync(engine, cluster, slurm.nodes())
            except SlurmError:
                pass  # the drains stand; the next sync-nodes sees them
    return rows


def drain_sync(engine, cluster: str, nodes) -> list:
    """Record Slurm's view of the cluster's nodes (`slurm.nodes()`): their boots, drains and resumes since the
    last view go into the node's life (store.node_life). Returns the changes."""
    from datetime import datetime, timezone

    from attribution.store.node_life import sync

    return sync(engine, cluster, nodes, datetime.now(timezone.utc))


def drain_resume(open_engine, slurm, cluster: str, node: str, actor: str) -> int:
    """Give a node back: resume it in Slurm, then (`open_engine()`: a context manager giving the engine) mark its
    earlier evidence handled. Returns how many events were marked."""
    from attribution.store import drain as sd

    slurm.resume(node)
    with open_engine() as engine:
        return sd.record_resume(engine, cluster, node, actor, "resumed by attribution drain resume")
