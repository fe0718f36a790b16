"""store/kueuewatch.py: the bookmark of a watched collection is replaced, never duplicated; a run is marked stored
once, however often it is marked."""

from __future__ import annotations

from attribution.store.kueuewatch import (attempts_of, load_bookmark, record_attempt, save_bookmark,
                                          stored_attempts)


def test_bookmarks_are_per_cluster_and_collection(store):
    assert load_bookmark(store, "c", "workloads.kueue.x-k8s.io/v1beta2") is None
    save_bookmark(store, "c", "workloads.kueue.x-k8s.io/v1beta2", "100")
    save_bookmark(store, "c", "workloads.kueue.x-k8s.io/v1beta2", "180")
    save_bookmark(store, "d", "workloads.kueue.x-k8s.io/v1beta2", "7")
    assert load_bookmark(store, "c", "workloads.kueue.x-k8s.io/v1beta2") == "180"
    assert load_bookmark(store, "d", "workloads.kueue.x-k8s.io/v1beta2") == "7"


def test_a_run_is_recorded_once(store):
    assert record_attempt(store, "c", "u1", "Finished/Failed/t1", 1, "ns", "w", "ns/w", "application", None)
    assert not record_attempt(store, "c", "u1", "Finished/Failed/t1", 1, "ns", "w", "ns/w", "application", None)
    assert record_attempt(store, "c", "u1", "Evicted/Preempted/t0", 2, "ns", "w", "ns/w@2", "scheduler", None)
    assert stored_attempts(store, "c", "u1") == {"Finished/Failed/t1": (1, "ns/w"), "Evicted/Preempted/t0": (2, "ns/w@2")}
    assert len(attempts_of(store, "c")) == 2 and attempts_of(store, "other") == []
