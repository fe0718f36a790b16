"""attribution.api.segments: a name travels as one percent-encoded path segment, a job id's `/` (a Kueue
workload's id is `namespace/name`), `?`, `#` and `%` included, and the service's routes take it back whole (the
API's and the dashboard's alike); a path part that is no name is refused."""

from __future__ import annotations

from urllib.parse import quote

import pytest

httpx = pytest.importorskip("httpx")

from attribution.api.segments import SLASH, routed_path

from tests.harness.service import service_on_new_database


def test_the_raw_path_is_routed_segment_by_segment():
    assert routed_path(b"/v1/nodes/c1/gpu01") is None  # nothing encoded that matters: the server's path stands
    assert routed_path(b"/v1/nodes/lab%2Feast/rack%2f7") == f"/v1/nodes/lab{SLASH}east/rack{SLASH}7"
    assert routed_path(b"/ui/nodes/c%2F1/gpu%232%3Fx%2541") == f"/ui/nodes/c{SLASH}1/gpu#2?x%41"
    with pytest.raises(ValueError):
        routed_path(b"/ui/nodes/c1/a%00b%2F")


@pytest.fixture(scope="module")
def service(pg_server, pg_template, tmp_path_factory):
    with service_on_new_database(pg_server, pg_template, tmp_path_factory.mktemp("segments"), "seg") as (svc, _):
        yield svc


def _path(*names: str) -> str:
    return "/".join(quote(n, safe="") for n in names)


def test_names_with_url_characters_are_reported_and_read_back_through_their_paths(service):
    cluster, job, node = "lab#east", "team/train-3", "rack7?gpu%2F01"
    body = {"nodes": [node, "gpu#2"], "state": "NODE_FAIL", "failed_node": node,
            "start": "2026-11-30T08:00:00Z", "end": "2026-11-30T09:00:00Z"}
    r = httpx.post(f"{service.url}/v1/jobs/{_path(cluster, job)}/context", json=body, headers=service.auth("report"), timeout=60)
    assert r.status_code == 200, r.text
    verdict = httpx.get(f"{service.url}/v1/jobs/{_path(cluster, job)}/verdict", headers=service.auth("read"), timeout=60).json()
    assert (verdict["job"]["cluster"], verdict["job"]["job_id"]) == (cluster, job)
    assert [c["node"] for c in verdict["culprits"]] == [node]
    history = httpx.get(f"{service.url}/v1/nodes/{_path(cluster, node)}", headers=service.auth("read"), timeout=60)
    assert history.status_code == 200 and history.json()["node"] == node and history.json()["cluster"] == cluster
    events = httpx.get(f"{service.url}/v1/nodes/{_path(cluster, node)}/events", headers=service.auth("read"),
                       params={"since": "2026-11-01T00:00:00Z"}, timeout=60)
    assert events.status_code == 200 and events.json()["node"] == node


def test_a_name_breaking_the_rule_is_refused_in_a_path_and_in_a_body(service):
    read, report = service.auth("read"), service.auth("report")
    r = httpx.get(f"{service.url}/v1/nodes/c1/{_path('gpu[1-2]')}", headers=read, timeout=60)
    assert r.status_code == 422 and "hostlist" in r.text
    r = httpx.get(f"{service.url}/v1/nodes/c1/{_path('rack/7')}", headers=read, timeout=60)
    assert r.status_code == 422 and "'/' in a name" in r.text  # no node name holds a slash, encoded or not
    r = httpx.get(f"{service.url}/v1/nodes/c1/{_path('y' * 256)}", headers=read, timeout=60)
    assert r.status_code == 422
    r = httpx.post(f"{service.url}/v1/jobs/c1/9/context", json={"nodes": ["gpu[1-2]"]}, headers=report, timeout=60)
    assert r.status_code == 422 and "hostlist" in r.text
    r = httpx.get(f"{service.url}/v1/nodes/c1/a%00b", headers=read, timeout=60)
    assert r.status_code == 404 and r.json()["error"] == "not_found"
