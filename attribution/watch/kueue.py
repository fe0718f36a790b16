"""`attribution watch kueue`: Kueue Workloads watched through the Kubernetes API, every failed run diagnosed and
stored once (watch.kueuerun), and `backfill --kueue`: the failed runs of a past range the API server still holds.

The informer pattern of kubernetes.io's API concepts ("Efficient detection of changes"): list (paginated, one
consistent snapshot) and then watch from the list's resourceVersion with bookmarks; a watch that ends (the
server's timeoutSeconds) or drops is started again from the last resourceVersion seen; `410 Gone` (the history
was compacted) is a new list. The bookmark stored (store.kueuewatch) is the resourceVersion up to which every run
that ended is stored, so a watcher killed at any point and started again resumes there without a gap, and the
runs it had stored already are skipped (once per workload UID and attempt).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from attribution.collect.kubeapi import Gone, KubeApi, KubeApiError, Resource, workloads
from attribution.watch.kueuerun import Stored, UidLocks, store_run
from attribution.watch.runs import run_end

log = logging.getLogger("attribution.watch")


def workload_resource(api: KubeApi, version: str) -> Resource:
    """The Workloads' collection: the configured version, or for `auto` v1beta2 when the server serves it."""
    if version != "auto":
        return workloads(version)
    try:
        api.list(workloads("v1beta2"), limit=1, one_page=True)
        return workloads("v1beta2")
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        return workloads("v1beta1")


class Progress:
    """The runs handed to the workers in the order their changes came, each with the resourceVersion of its
    change: the bookmark may move to a version once every run up to it is stored."""

    def __init__(self) -> None:
        self._queue: deque[tuple[str, list[Future]]] = deque()

    def add(self, rv: str, futures: list[Future]) -> None:
        self._queue.append((rv, futures))

    def safe(self) -> str | None:
        """The newest resourceVersion whose runs, and all before them, are stored (None: no progress)."""
        last = None
        while self._queue and all(f.done() and not f.cancelled() and f.exception() is None
                                  for f in self._queue[0][1]):
            last = self._queue.popleft()[0]
        return last

    def failed(self) -> list[Future]:
        return [f for _, fs in self._queue for f in fs if f.done() and (f.cancelled() or f.exception() is not None)]

    def replace(self, old: Future, new: Future) -> None:
        for _, fs in self._queue:
            fs[:] = [new if f is old else f for f in fs]


@dataclass
class WatchSummary:
    outcomes: Counter = field(default_factory=Counter)
    runs: list[Stored] = field(default_factory=list)
    lists: int = 0
    watches: int = 0
    changes: int = 0
    bookmarks: int = 0
    gone: int = 0
    errors: list[str] = field(default_factory=list)


class KueueWatcher:
    """One cluster's Workloads. `run(stop)` watches until `stop()` says so (checked after every change and every
    watch request), finishing the runs in hand and storing the bookmark of what is done; interrupted (an exception:
    SIGTERM, Ctrl-C), it finishes only the runs already started."""

    def __init__(self, ruleset, engine, settings, api: KubeApi, cluster: str) -> None:
        self.ruleset, self.engine, self.api, self.cluster = ruleset, engine, api, cluster
        self.connectors = settings.connectors
        self.conf = settings.watch.kueue
        self.locks = UidLocks()
        self.summary = WatchSummary()
        self._submitted: dict[str, tuple[dict, object, Future]] = {}

    # -- the runs ---------------------------------------------------------------------------------------------
    def _store(self, doc: dict, end) -> Stored:
        stored = store_run(self.ruleset, self.engine, self.connectors, self.api, self.cluster, doc, end, self.locks,
                           self.conf.workload_seconds, self.conf.page_size)
        if stored.outcome is not None:
            self.summary.outcomes[stored.outcome] += 1
            self.summary.runs.append(stored)
        return stored

    def _consider(self, pool: ThreadPoolExecutor, doc: dict) -> list[Future]:
        end = run_end(doc)
        if end is None or not end.failed:
            return []
        if self.conf.namespaces and end.namespace not in self.conf.namespaces:
            return []
        seen = self._submitted.get(end.key + end.uid)
        if seen is not None and not seen[2].cancelled() and seen[2].exception() is None:
            return [seen[2]]  # the same run again (a later copy of the ended object): stored once
        fut = pool.submit(self._store, doc, end)
        self._submitted[end.key + end.uid] = (doc, end, fut)
        return [fut]

    def _retry_failed(self, pool: ThreadPoolExecutor, progress: Progress) -> None:
        for f in progress.failed():
            for key, (doc, end, fut) in list(self._submitted.items()):
                if fut is f:
                    if not f.cancelled():
                        self.summary.errors.append(f"{end.ref}: {f.exception()}")
                        log.warning("%s: not stored (%s); trying again", end.ref, f.exception())
                    new = pool.submit(self._store, doc, end)
                    self._submitted[key] = (doc, end, new)
                    progress.replace(f, new)

    def wait_idle(self) -> None:
        """Return once every run handed to the workers so far is done (stored, or failed)."""
        from concurrent.futures import wait

        wait([f for _, _, f in list(self._submitted.values())])

    # -- list and watch ----------------------------------------------------------------------------------------
    def _relist(self, res: Resource, pool: ThreadPoolExecutor, progress: Progress) -> str:
        items, rv = self.api.list(res, limit=self.conf.page_size)
        self.summary.lists += 1
        futures = [f for doc in items for f in self._consider(pool, doc)]
        progress.add(rv, futures)
        log.info("listed %d workload(s) at resourceVersion %s: %d ended failed", len(items), rv, len(futures))
        return rv

    def run(self, stop: Callable[[], bool] = lambda: False) -> WatchSummary:
        from attribution.store.kueuewatch import load_bookmark, save_bookmark

        res = workload_resource(self.api, self.conf.api_version)
        saved = rv = load_bookmark(self.engine, self.cluster, res.name)
        progress = Progress()
        pool = ThreadPoolExecutor(self.conf.concurrency, thread_name_prefix="kueue-run")

        def checkpoint() -> None:
            nonlocal saved
            safe = progress.safe()
            if safe is not None and safe != saved:
                save_bookmark(self.engine, self.cluster, res.name, safe)
                saved = safe

        interrupted = True
        try:
            if rv is None:
                rv = self._relist(res, pool, progress)
            while not stop():
                try:
                    self.summary.watches += 1
                    for ev in self.api.watch(res, rv, self.conf.watch_seconds):
                        self.summary.changes += ev.type != "BOOKMARK"
                        self.summary.bookmarks += ev.type == "BOOKMARK"
                        futures = [] if ev.type == "BOOKMARK" else self._consider(pool, ev.object)
                        rv = ev.resource_version or rv
                        progress.add(rv, futures)
                        checkpoint()
                        if stop():
                            break
                except Gone:
                    self.summary.gone += 1
                    log.info("resourceVersion %s expired (410 Gone): listing again", rv)
                    rv = self._relist(res, pool, progress)
                except KubeApiError as exc:
                    self.summary.errors.append(str(exc))
                    log.warning("watch: %s; watching again from %s", exc, rv)
                    if not stop():
                        time.sleep(self.conf.retry_seconds)
                self._retry_failed(pool, progress)
                checkpoint()
            interrupted = False
        finally:
            # stopped: every run in hand is finished; interrupted (a signal, an error): what runs finishes, what
            # waited is left to the next start (the bookmark stays before it)
            pool.shutdown(wait=True, cancel_futures=interrupted)
            try:
                checkpoint()
            except Exception as exc:  # the database is gone too: the bookmark stays behind, nothing is lost
                log.warning("bookmark not saved: %s", exc)
        return self.summary


def backfill_kueue(ruleset, engine, settings, api: KubeApi, cluster: str, since: datetime, until: datetime,
                   redo: bool = False, progress: Callable[[Stored], None] | None = None) -> WatchSummary:
    """Every failed run whose end is in [since, until) among the Workloads the API server still holds, stored as
    the watcher stores them (runs stored before are skipped unless `redo`), oldest end first."""
    conf = settings.watch.kueue
    res = workload_resource(api, conf.api_version)
    items, _ = api.list(res, limit=conf.page_size)
    summary = WatchSummary(lists=1)
    runs = []
    for doc in items:
        end = run_end(doc)
        if end is None or not end.failed or end.at is None or not since <= end.at < until:
            continue
        if conf.namespaces and end.namespace not in conf.namespaces:
            continue
        runs.append((end.at, end.ref, doc, end))
    locks = UidLocks()
    for _, _, doc, end in sorted(runs, key=lambda r: (r[0], r[1])):
        stored = store_run(ruleset, engine, settings.connectors, api, cluster, doc, end, locks, conf.workload_seconds,
                           conf.page_size, redo=redo)
        summary.runs.append(stored)
        summary.outcomes[stored.outcome or ("not diagnosable" if stored.problem else "already stored")] += 1
        if progress is not None:
            progress(stored)
    return summary


__all__ = ["KueueWatcher", "WatchSummary", "Progress", "backfill_kueue", "workload_resource"]
