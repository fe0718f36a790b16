"""collect/kubeapi.py against the fake API server (tests/harness/kubeapi.py): a list is one snapshot however many
pages it takes, an expired continue token or resourceVersion is Gone (as an ERROR event or as HTTP 410), a watch
gives the changes after its resourceVersion and a bookmark, a dropped stream is an error the caller recovers from,
and a log that is not there says so with its status."""

from __future__ import annotations

import time

import pytest

from attribution.collect.kubeapi import PODS, Gone, KubeApi, KubeApiError, workloads
from attribution.config import KubernetesSettings

from tests.harness.kubeapi import FakeKubeApi

KUEUE = "kueue.x-k8s.io"


def _wl(name: str, **status) -> dict:
    return {"kind": "Workload", "metadata": {"namespace": "ns", "name": name}, "status": status}


@pytest.fixture
def fake():
    with FakeKubeApi() as f:
        for i in range(5):
            f.put(KUEUE, "workloads", _wl(f"w{i}"))
        yield f


@pytest.fixture
def api(fake):
    with KubeApi(KubernetesSettings(api_server=fake.url, timeout=10)) as a:
        yield a


def test_a_paginated_list_is_one_snapshot(fake, api):
    changed = []

    def change_between_pages():  # a change after the first page is not in the pages that follow
        if not changed:
            changed.append(fake.put(KUEUE, "workloads", _wl("w4", note="later")))

    orig = fake._list

    def listing(h, *a):
        orig(h, *a)
        change_between_pages()

    fake._list = listing
    items, rv = api.list(workloads("v1beta2"), limit=2)
    assert [o["metadata"]["name"] for o in items] == ["w0", "w1", "w2", "w3", "w4"]
    assert "note" not in items[4]["status"] and rv == "1005"
    assert [r["query"].get("continue") for r in fake.requests] == [None, "1005:2", "1005:4"]
    assert all(o["apiVersion"] == "kueue.x-k8s.io/v1beta2" for o in items)


def test_an_expired_continue_token_is_gone(fake, api):
    items, rv = api.list(workloads("v1beta1"), limit=2, one_page=True)
    fake.put(KUEUE, "workloads", _wl("w9"))
    fake.compact()
    with pytest.raises(Gone):
        api._json(workloads("v1beta1").path(), {"limit": 2, "continue": f"{rv}:2"})


def test_a_watch_gives_the_changes_after_its_version_then_a_bookmark(fake, api):
    _, rv = api.list(workloads("v1beta2"))
    fake.timeline = [lambda f: (f.put(KUEUE, "workloads", _wl("w1", x=1)), f.delete(KUEUE, "workloads", "ns", "w2"))]
    events = [(e.type, e.object["metadata"].get("name"), e.resource_version)
              for e in api.watch(workloads("v1beta2"), rv, 30)]
    assert events == [("MODIFIED", "w1", "1006"), ("DELETED", "w2", "1007"), ("BOOKMARK", None, "1007")]
    q = fake.requests[-1]["query"]
    assert q["watch"] == "true" and q["allowWatchBookmarks"] == "true" and q["timeoutSeconds"] == "30"


@pytest.mark.parametrize("as_http", [False, True])
def test_a_compacted_version_is_gone(fake, api, as_http):
    fake.compact()
    fake.gone_as_http = as_http
    with pytest.raises(Gone, match="too old resource version"):
        list(api.watch(workloads("v1beta2"), "1001", 30))


def test_a_dropped_stream_is_an_error_after_what_came_through(fake, api):
    fake.put(KUEUE, "workloads", _wl("w1", x=1))
    fake.put(KUEUE, "workloads", _wl("w2", x=1))
    fake.timeline = ["drop"]
    got = []
    with pytest.raises(KubeApiError, match="dropped"):
        for e in api.watch(workloads("v1beta2"), "1005", 30):
            got.append(e.resource_version)
    assert got == ["1006"]


def test_a_version_the_server_does_not_serve_is_404(fake, api):
    fake.served[KUEUE] = ("v1beta1",)
    with pytest.raises(KubeApiError) as exc:
        api.list(workloads("v1beta2"))
    assert exc.value.status == 404


def test_logs_stream_and_a_missing_previous_instance_is_400(fake, api):
    fake.put("", "pods", {"kind": "Pod", "metadata": {"namespace": "ns", "name": "p0"}})
    fake.logs[("ns", "p0", "main", False)] = "2026-03-10T09:00:00Z hello\n"
    s = api.log("ns", "p0", "main", False, time.monotonic() + 10)
    try:
        assert s.read(1 << 16) == b"2026-03-10T09:00:00Z hello\n" and s.read(1 << 16) == b""
    finally:
        s.close()
    assert fake.requests[-1]["query"]["timestamps"] == "true"
    with pytest.raises(KubeApiError) as exc:
        api.log("ns", "p0", "main", True, time.monotonic() + 10)
    assert exc.value.status == 400
    with pytest.raises(KubeApiError) as exc:
        api.get(PODS, "ns", "gone")
    assert exc.value.status == 404


def test_a_server_that_is_down_is_an_error_not_a_hang():
    with FakeKubeApi() as f:
        url = f.url
    with KubeApi(KubernetesSettings(api_server=url, timeout=2)) as a:
        with pytest.raises(KubeApiError):
            a.list(workloads("v1beta2"))
