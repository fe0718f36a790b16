"""One ended run of a Kueue workload, diagnosed and stored: the use case behind `attribution watch kueue` and
`attribution backfill --kueue`.

The run is read through the Kubernetes API as it was seen when it ended (the Workload object in hand, not a later
copy: a requeued workload may be running its next attempt by then): its pods (by the owner's label selector),
their nodes and events, the pods' logs; then the configured connectors (Loki, Prometheus, files) run as for a live
`diagnose --kueue-workload` (pipeline.diagnose_live, keeping what they read for replay) and the verdict is stored
with its evidence (pipeline.ingest_diagnosis, source `kueue`). What could not be read (pods already deleted, a
previous log rotated away, a node gone) is coverage.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass

from attribution.collect.kubeapi import EVENTS, NODES, PODS, KubeApi, KubeApiError, Resource
from attribution.collect.podlogs import collect_api_pod_logs
from attribution.errors import InputError
from attribution.frozen import replace
from attribution.model import Coverage
from attribution.watch.runs import RunEnd, attempt_job_id

log = logging.getLogger("attribution.watch")

SOURCE = "kueue"
#: Owners whose pods carry another object's name: a RayJob's pods are its RayCluster's (status.rayClusterName).
RAYJOB = Resource("ray.io", "v1", "rayjobs")


@dataclass(frozen=True)
class Stored:
    """What became of one run: its attempt number, the job it was stored as and its verdict's outcome (None:
    it was stored before, or could not be diagnosed: `problem` says why)."""

    end: RunEnd
    attempt: int
    job_id: str
    outcome: str | None
    problem: str | None = None


class UidLocks:
    """One lock per workload UID: the runs of one workload are numbered and stored one at a time."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, uid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(uid, threading.Lock())


def _owner(doc: dict) -> dict:
    owners = [o for o in (doc.get("metadata") or {}).get("ownerReferences") or [] if isinstance(o, dict)]
    return next((o for o in owners if o.get("controller")), owners[0] if owners else {})


def _pod_selector(api: KubeApi, connectors, doc: dict) -> str | None:
    from attribution.scope.kueue import pod_selector

    owner = _owner(doc)
    kind, name = owner.get("kind"), owner.get("name")
    ns = (doc.get("metadata") or {}).get("namespace")
    if kind == "RayJob" and name:  # its pods are the RayCluster's it made
        try:
            name = (api.get(RAYJOB, ns, name).get("status") or {}).get("rayClusterName") or name
        except KubeApiError as exc:
            log.warning("workload %s/%s: RayJob %s not readable (%s)", ns, doc["metadata"].get("name"), name, exc)
    return pod_selector(kind, name, connectors.kubernetes.pod_selectors)


def _events(api: KubeApi, ns: str, names: set[str], limit: int) -> tuple[list[dict], list[Coverage]]:
    try:
        items, _ = api.list(EVENTS, ns, limit=limit)
    except KubeApiError as exc:
        return [], [Coverage("scheduler", None, "error", reason=f"events of namespace {ns}: {exc}")]
    return [e for e in items if (e.get("involvedObject") or {}).get("name") in names], []


def diagnose_run(ruleset, connectors, api: KubeApi, cluster: str, doc: dict, job_id: str, deadline: float,
                 page_size: int = 500):
    """The Diagnosis (with the evidence kept for replay) of the run `doc` (a Workload as it ended)."""
    from attribution.pipeline.live import diagnose_live
    from attribution.replay.keep import LineKeeper
    from attribution.scope.kubeevidence import kubernetes_observations
    from attribution.scope.kueue import workload_context

    meta = doc.get("metadata") or {}
    ns, name = str(meta.get("namespace")), str(meta.get("name"))
    what = f"workload {ns}/{name}"
    cov: list[Coverage] = []
    pods: list[dict] = []
    selector = _pod_selector(api, connectors, doc)
    if selector is None:
        cov.append(Coverage("job", None, "missing", reason=f"{what}: no pod selector for its owner kind "
                                                           f"{_owner(doc).get('kind')!r} (kubernetes.pod_selectors)"))
    else:
        try:
            pods, _ = api.list(PODS, ns, label_selector=selector, limit=page_size)
        except KubeApiError as exc:
            cov.append(Coverage("job", None, "error", reason=f"{what} pods: {exc}"))
    wl = workload_context(doc, {"kind": "List", "items": pods} if pods else None, cluster, what)
    ctx = replace(wl.context, job_id=job_id)
    nodes = []
    for node in ctx.nodes:
        try:
            nodes.append(api.get(NODES, None, node))
        except KubeApiError as exc:
            cov.append(Coverage("scheduler", node, "missing" if exc.status == 404 else "error",
                                reason=f"node {node}: {exc}"))
    events, ecov = _events(api, ns, {name} | {p.name for p in wl.pods}, page_size)
    cov += ecov
    wl = dataclasses.replace(wl, context=ctx, evidence=tuple(kubernetes_observations(ctx, doc, pods, nodes, events)))
    keeper = LineKeeper(ruleset)
    k = connectors.kubernetes
    obs = []
    if k.pod_logs:
        o, c = collect_api_pod_logs(api, ns, wl.pods, ctx, ruleset.prefilter("job"),
                                    min(deadline, time.monotonic() + k.budget), k.previous, keeper=keeper)
        obs, cov = o, cov + c
    # the pods' logs are read above through the API; the other connectors run as for `diagnose --kueue-workload`
    rest = dataclasses.replace(connectors, kubernetes=dataclasses.replace(k, pod_logs=False))
    return diagnose_live(ruleset, rest, ctx, obs, cov, workload=wl, keeper=keeper)


def store_run(ruleset, engine, connectors, api: KubeApi, cluster: str, doc: dict, end: RunEnd, locks: UidLocks,
              workload_seconds: float, page_size: int = 500, redo: bool = False) -> Stored:
    """Diagnose and store one run unless it is stored already (`redo`: again, as the same job). Exactly once per
    workload UID and run: the run is marked stored after its verdict is (a crash in between stores it again on
    the next start, which ingest makes a no-op: the same evidence adds nothing)."""
    from attribution.pipeline.ingest import ingest_diagnosis
    from attribution.store.kueuewatch import record_attempt, stored_attempts

    with locks(end.uid):
        stored = stored_attempts(engine, cluster, end.uid)
        if end.key in stored and not redo:
            n, job_id = stored[end.key]
            return Stored(end, n, job_id, None)
        attempt = stored[end.key][0] if end.key in stored else max(len(stored) + 1, end.kueue_attempt or 0)
        job_id = attempt_job_id(end.namespace, end.name, attempt)
        deadline = time.monotonic() + workload_seconds
        try:
            d = diagnose_run(ruleset, connectors, api, cluster, doc, job_id, deadline, page_size)
        except InputError as exc:  # nothing to attribute it to (no pod left and no topology assignment)
            record_attempt(engine, cluster, end.uid, end.key, attempt, end.namespace, end.name, job_id, None, end.at)
            log.warning("%s: %s", end.ref, exc)
            return Stored(end, attempt, job_id, None, problem=str(exc))
        _, verdict = ingest_diagnosis(ruleset, engine, d, source=SOURCE)
        outcome = (verdict or d.verdict).outcome
        record_attempt(engine, cluster, end.uid, end.key, attempt, end.namespace, end.name, job_id, outcome, end.at)
        log.info("%s attempt %d (%s %s): %s", end.ref, attempt, end.condition, end.reason, outcome)
        return Stored(end, attempt, job_id, outcome)


__all__ = ["Stored", "UidLocks", "diagnose_run", "store_run", "SOURCE"]
