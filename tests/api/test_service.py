"""The Attribution Service (attribution serve) running as a real server on a real PostgreSQL: authentication,
4xx for bad input, schema-driven fuzzing, idempotent reports, a 200-node job reported at once, the hooks
reporting through it, and uploaded bundles diagnosed without storing them."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

# The service's dependencies (pyproject.toml): skipped, not broken, in a venv installed before they were added.
for _needed in ("fastapi", "uvicorn"):
    pytest.importorskip(_needed)
httpx = pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from sqlalchemy import text

from attribution.node import spool
from attribution.cli import main
from attribution.config import parse_settings
from attribution.errors import ConfigError
from attribution.fleetgen import GeneratedJob, write_bundle
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict
from attribution.scope.bundle import load_context

from tests.conftest import INCIDENTS
from tests.harness.documents import documents
from tests.harness.hooknode import Node
from tests.harness.pg import free_port
from tests.harness.service import start_service, write_tokens

UTC = timezone.utc
SERVICE_LIMITS = {"max_body_bytes": 8 * 1024 * 1024, "max_upload_bytes": 2 * 1024 * 1024,
                  "max_bundle_files": 300, "max_bundle_bytes": 16 * 1024 * 1024,
                  "request_timeout_seconds": 120}  # a slow machine still takes 200 reports of one job at once


# -- fixtures -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def service_db(node_db):
    return node_db  # tests/conftest.py: this module's database


@pytest.fixture(scope="module")
def service(service_db, tmp_path_factory):
    svc = start_service(service_db, tmp_path_factory.mktemp("service"), service=SERVICE_LIMITS)
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def db(node_engine):
    return node_engine


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service.url, timeout=60) as c:
        yield c


# -- helpers ----------------------------------------------------------------------------------------------------------

def pieces(ruleset, bundle: Path) -> list[dict]:
    """The observation documents the hooks would send for a bundle: one per node (made by the node collector's
    code from its folder) and the controller's (tests/harness/documents.py)."""
    return documents(ruleset, bundle)


def job_of(doc: dict) -> tuple[str, str]:
    if doc["reporter"]["role"] == "controller":
        return doc["context"]["cluster"], doc["context"]["job_id"]
    return doc["cluster"], doc["slurm"]["SLURM_JOB_ID"]


def decision(v: dict) -> dict:
    """What a verdict decides (the rest counts what the store holds: tests/pipeline/test_intake.py compares it
    with the bundle stored whole)."""
    return {k: v[k] for k in ("outcome", "confidence", "action", "culprits", "root_cause")}


def whole_verdict(ruleset, bundle: Path) -> dict:
    return verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)


def verdict_of(http, service, cluster: str, job_id: str, settled: bool = True) -> dict:
    """The job's verdict; `settled`: once no stored report awaits its attribution (the service attributes a job
    at most once per settle interval: the answer says `Attribution-Pending: true` until the last one ran)."""
    deadline = time.monotonic() + 60
    while True:
        r = http.get(f"/v1/jobs/{cluster}/{job_id}/verdict", headers=service.auth("read"))
        assert r.status_code == 200, r.text
        assert r.headers["attribution-pending"] in ("true", "false")
        if not settled or r.headers["attribution-pending"] == "false":
            return r.json()
        assert time.monotonic() < deadline, "the job's reports were never attributed"
        time.sleep(0.1)


def post(http, service, data: dict, who: str = "report") -> httpx.Response:
    return http.post("/v1/observations", json=data, headers=service.auth(who))


def targz(members: dict[str, bytes | tuple[str, str]], top: str = "") -> bytes:
    """A tar.gz in memory: name -> bytes (a file) or ("symlink"|"hardlink", target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(top + name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def bundle_targz(bundle: Path, top: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(bundle, arcname=top if top is not None else bundle.name)
    return buf.getvalue()


def job_counts(db, cluster: str, job_id: str) -> dict:
    with db.connect() as c:
        row = c.execute(text(
            "SELECT count(DISTINCT j.id), count(DISTINCT je.event_id), "
            "(SELECT count(*) FROM attribution.coverage cv JOIN attribution.jobs j2 ON j2.id = cv.job_ref "
            " WHERE j2.cluster = :c AND j2.job_id = :j) "
            "FROM attribution.jobs j LEFT JOIN attribution.job_events je ON je.job_ref = j.id "
            "WHERE j.cluster = :c AND j.job_id = :j"), {"c": cluster, "j": job_id}).one()
    return {"jobs": row[0], "events": row[1], "coverage": row[2]}


# -- probes and the OpenAPI description -------------------------------------------------------------------------------

def test_probes_answer_without_a_token_and_say_nothing_else(http):
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}


def test_the_openapi_description_lists_every_endpoint_with_its_scope(http):
    doc = http.get("/openapi.json").json()
    ops = {(m.upper(), p): op for p, item in doc["paths"].items() for m, op in item.items()}
    assert set(ops) == {
        ("GET", "/healthz"), ("GET", "/readyz"), ("POST", "/v1/observations"),
        ("POST", "/v1/jobs/{cluster}/{job_id}/context"), ("GET", "/v1/jobs/{cluster}/{job_id}/verdict"),
        ("GET", "/v1/nodes/{cluster}/{node}/events"), ("GET", "/v1/recurring-faults"),
        ("GET", "/v1/drain-candidates"), ("POST", "/v1/diagnose"), ("GET", "/v1/jobs"),
        ("GET", "/v1/nodes/{cluster}/{node}")}
    scopes = {k: op.get("x-scope") for k, op in ops.items() if k[1].startswith("/v1/")}
    assert scopes[("POST", "/v1/observations")] == scopes[("POST", "/v1/jobs/{cluster}/{job_id}/context")] \
        == "report"
    assert {s for k, s in scopes.items() if k[0] == "GET" or k[1] == "/v1/diagnose"} == {"read"}
    assert all(op.get("security") for k, op in ops.items() if k[1].startswith("/v1/"))


# -- authentication ---------------------------------------------------------------------------------------------------

#: Every /v1 endpoint with a request that succeeds (or finds nothing) with the right token.
ENDPOINTS = [
    ("POST", "/v1/observations", "report"),
    ("POST", "/v1/jobs/authc/1/context", "report"),
    ("GET", "/v1/jobs/authc/1/verdict", "read"),
    ("GET", "/v1/nodes/authc/n1/events", "read"),
    ("GET", "/v1/recurring-faults", "read"),
    ("GET", "/v1/drain-candidates", "read"),
    ("POST", "/v1/diagnose", "read"),
]


def _request(http, method, path, headers, ruleset=None):
    if path == "/v1/observations":
        return http.post(path, json=_doc(cluster="authc"), headers=headers)
    if path.endswith("/context"):
        return http.post(path, json={"nodes": ["n1"], "state": "FAILED", "start": "2026-01-05T10:00:00Z",
                                     "end": "2026-01-05T11:00:00Z"}, headers=headers)
    if path == "/v1/diagnose":
        return http.post(path, content=bundle_targz(INCIDENTS / "06-ib-link-down"),
                         headers={**headers, "Content-Type": "application/gzip"})
    return http.request(method, path, headers=headers)


def _no_data(r: httpx.Response) -> None:
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "message", "details"} and body["message"]


@pytest.mark.parametrize("method,path,scope", ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_every_endpoint_rejects_a_missing_or_wrong_token(http, service, method, path, scope):
    for headers in ({}, {"Authorization": "Bearer " + "0" * 48}, {"Authorization": f"Basic {service.tokens[scope]}"},
                    {"Authorization": "Bearer"}, {"Authorization": f"Bearer {service.tokens[scope]}x"}):
        r = _request(http, method, path, headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers.get("www-authenticate", "").startswith("Bearer")
        _no_data(r)
    other = "read" if scope == "report" else "report"
    r = _request(http, method, path, service.auth(other))
    assert r.status_code == 403, r.text
    _no_data(r)
    assert _request(http, method, path, service.auth(scope)).status_code in (200, 404)
    assert _request(http, method, path, service.auth("both")).status_code in (200, 404)


def test_an_unauthenticated_request_is_refused_before_its_body_is_read(http):
    r = http.post("/v1/observations", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    r = http.post("/v1/diagnose", content=b"x" * (3 * 1024 * 1024), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 401


# -- bad input --------------------------------------------------------------------------------------------------------

GOOD_CONTEXT = {"cluster": "bad", "job_id": "7", "nodes": ["n1", "n2"], "state": "FAILED",
                "start": "2026-02-02T10:00:00Z", "end": "2026-02-02T11:00:00Z"}
XID_LINE = "[Mon Feb  2 10:30:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."


def _doc(**over) -> dict:
    """A node's observation document (node/document.py) of job bad/7 on n1, with one kernel line kept."""
    d = {"format": "attribution.observations/1",
         "reporter": {"role": "node", "name": "n1", "agent": "test", "filter": None}, "cluster": "bad",
         "slurm": {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n[1-2]",
                   "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_START_TIME": "1770026400",
                   "SLURM_JOB_END_TIME": "1770030000"},
         "times": {"now": 1770030001.0, "prolog_start": None, "boot": None, "lookback": 86400, "zone": "UTC"},
         "logs": [{"source": "kernel", "origin": "/var/log/kern.log", "status": "ok", "lines": 10, "bytes": 900,
                   "blocks": [[3, [XID_LINE]]], "cut": False}]}
    d.update(over)
    return d


def _log(**over) -> dict:
    return dict(_doc()["logs"][0], **over)


MALFORMED_BATCHES = {
    "not JSON": b"{\"format\": ",
    "a list": b"[1, 2]",
    "NaN time": json.dumps(_doc()).replace('"now": 1770030001.0', '"now": NaN').encode(),
    "deeply nested": b"[" * 100000 + b"]" * 100000,
    "no format": {k: v for k, v in _doc().items() if k != "format"},
    "an old agent's report": {"type": "ingest", "source": "node", "context": GOOD_CONTEXT, "events": []},
    "an unknown role": _doc(reporter={"role": "boss", "name": "n1"}),
    "no reporter name": _doc(reporter={"role": "node"}),
    "a reporter name with a slash": _doc(reporter={"role": "node", "name": "a/b"}),
    "an unknown Slurm value": _doc(slurm=dict(_doc()["slurm"], LD_PRELOAD="x")),
    "no job id": _doc(slurm={"SLURMD_NODENAME": "n1"}),
    "another node's name in the environment": _doc(slurm=dict(_doc()["slurm"], SLURMD_NODENAME="n2")),
    "job output from a node": _doc(logs=[_log(source="job")]),
    "observations from a node": _doc(observations=[{"source": "job"}]),
    "a status that is not one": _doc(logs=[_log(status="great")]),
    "NUL in a line": _doc(logs=[_log(blocks=[[3, ["a\u0000b"]]])]),
    "a newline in a line": _doc(logs=[_log(blocks=[[3, ["a\nb"]]])]),
    "a line too long": _doc(logs=[_log(blocks=[[3, ["x" * 9000]]])]),
    "blocks out of order": _doc(logs=[_log(blocks=[[5, ["a", "b"]], [6, ["c"]]])]),
    "an empty block": _doc(logs=[_log(blocks=[[5, []]])]),
    "a lone surrogate": json.dumps(_doc(logs=[_log(blocks=[[3, ["\ud800"]]])])).encode(),
    "a time in year 9999": _doc(times=dict(_doc()["times"], now=253402300799.0)),
    "an unknown time zone": _doc(times=dict(_doc()["times"], zone="Mars/Olympus")),
    "a hostlist to expand": _doc(slurm=dict(_doc()["slurm"], SLURM_NODELIST="n[1-99999999]")),
    "an unknown snapshot file": _doc(counters={"prolog": {"evil.sh": "x"}}),
    "too many logs": _doc(logs=[_log()] * 20),
}


@pytest.mark.parametrize("name", list(MALFORMED_BATCHES))
def test_malformed_observation_batches_get_a_4xx_with_a_message(http, service, name):
    body = MALFORMED_BATCHES[name]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = http.post("/v1/observations", content=content,
                  headers={**service.auth("report"), "Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    _no_data(r)


def test_a_body_without_a_json_content_type_is_refused_with_a_message(http, service):
    r = http.post("/v1/observations", content=json.dumps(_doc()).encode(),
                  headers={**service.auth("report"), "Content-Type": "text/plain"})
    assert r.status_code == 422 and "application/json" in r.json()["message"]


def test_a_body_that_is_empty_or_not_json_is_refused_with_a_message(http, service):
    """The bodies are parsed off the event loop (api/bodies.py) with the answers FastAPI gives a declared body."""
    rep = {**service.auth("report"), "Content-Type": "application/json"}
    for path in ("/v1/observations", "/v1/jobs/bad/7/context"):
        r = http.post(path, content=b"", headers=rep)
        assert r.status_code == 422 and r.json()["message"] == "body: Field required", r.text
        r = http.post(path, content=b'{"logs": [1, ', headers=rep)
        assert r.status_code == 422 and "JSON" in r.json()["message"], r.text
        r = http.post(path, content=b'{"nodes": ["n1"]}', headers=service.auth("report"))  # no Content-Type
        assert r.status_code == 422 and "application/json" in r.json()["message"], r.text
    r = http.post("/v1/observations", content=json.dumps(_doc(logs=[_log(status="great")])).encode(), headers=rep)
    assert r.status_code == 422 and r.json()["message"].startswith("report: logs[0].status: "), r.text


def test_a_body_over_the_limit_is_refused_with_413_declared_or_streamed(http, service):
    big = _doc(logs=[_log(blocks=[[1, ["x" * 1000] * 9000]])])
    r = post(http, service, big)
    assert r.status_code == 413 and "limit" in r.json()["message"]

    def chunks():
        data = json.dumps(big).encode()
        for i in range(0, len(data), 65536):
            yield data[i:i + 65536]

    r = http.post("/v1/observations", content=chunks(),
                  headers={**service.auth("report"), "Content-Type": "application/json"})
    assert r.status_code == 413


def test_malformed_contexts_and_queries_get_a_4xx_with_a_message(http, service):
    rep, rd = service.auth("report"), service.auth("read")
    cases = [
        http.post("/v1/jobs/bad/7/context", json=dict(GOOD_CONTEXT, job_id="8"), headers=rep),  # path mismatch
        http.post("/v1/jobs/bad/7/context", json={"state": "FAILED"}, headers=rep),  # no nodes
        http.post("/v1/jobs/bad/7/context?source=mallory", json=GOOD_CONTEXT, headers=rep),
        http.get("/v1/nodes/bad/n1/events?since=last-week", headers=rd),
        http.get("/v1/nodes/bad/n1/events?limit=0", headers=rd),
        http.get("/v1/jobs/bad/7/verdict?start=soon", headers=rd),
        http.get("/v1/jobs/bad%00x/7/verdict", headers=rd),
        http.get("/v1/recurring-faults?limit=100000000", headers=rd),
        http.get("/v1/nodes/bad/n%5B1-3%5D/events", headers=rd),
    ]
    for r in cases:
        assert 400 <= r.status_code < 500, r.text
        _no_data(r)


def test_a_verdict_nobody_reported_is_a_404_with_a_message(http, service):
    r = http.get("/v1/jobs/nowhere/424242/verdict", headers=service.auth("read"))
    assert r.status_code == 404
    _no_data(r)


MALICIOUS_ARCHIVES = {
    "not gzip": b"hello, this is not an archive",
    "gzip but not tar": __import__("gzip").compress(b"just text" * 100),
    "empty archive": targz({}),
    "path traversal": targz({"context.yaml": b"cluster: x\n", "../../escaped.txt": b"gotcha"}),
    "absolute path": targz({"/tmp/attribution-absolute-escape.txt": b"gotcha"}),
    "symlink out": targz({"context.yaml": b"cluster: x\n", "nodes/n1/kernel.log": ("symlink", "/etc/passwd")}),
    "symlink up": targz({"context.yaml": b"cluster: x\n", "up": ("symlink", "../../..")}),
    "hard link out": targz({"context.yaml": b"cluster: x\n", "h": ("hardlink", "/etc/passwd")}),
    "too many files": targz({f"nodes/n{i}/kernel.log": b"" for i in range(400)}),
    "too many bytes": targz({"context.yaml": b"cluster: x\n", "job/out": b"\0" * (20 * 1024 * 1024)}),
    "no context.yaml": targz({"nodes/n1/kernel.log": b"hello\n"}),
    "malformed context.yaml": targz({"context.yaml": b"cluster: [unclosed\n"}),
    "a node bomb": targz({"context.yaml": b"cluster: x\njob_id: 1\nnodes: [" +
                          b", ".join(b'"n[1-99999]"' for _ in range(30)) + b"]\n"}),
}


@pytest.mark.parametrize("name", list(MALICIOUS_ARCHIVES))
def test_bad_or_malicious_bundle_uploads_get_a_4xx_and_write_nothing_outside(http, service, name, tmp_path):
    r = http.post("/v1/diagnose", content=MALICIOUS_ARCHIVES[name],
                  headers={**service.auth("read"), "Content-Type": "application/gzip"})
    assert 400 <= r.status_code < 500, r.text
    _no_data(r)
    assert "attribution-upload-" not in r.json()["message"]  # no server paths in messages
    assert not Path("/tmp/attribution-absolute-escape.txt").exists()


def test_an_upload_over_the_limit_or_of_another_type_is_refused(http, service):
    r = http.post("/v1/diagnose", content=os.urandom(3 * 1024 * 1024),
                  headers={**service.auth("read"), "Content-Type": "application/gzip"})
    assert r.status_code == 413
    r = http.post("/v1/diagnose", content=b"{}", headers={**service.auth("read"), "Content-Type": "application/json"})
    assert r.status_code == 415
    _no_data(r)


# -- schema-driven tests ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api_schema(service):
    return schemathesis.openapi.from_url(service.url + "/openapi.json")


OPERATIONS = [("GET", "/healthz"), ("GET", "/readyz"), ("POST", "/v1/observations"),
              ("POST", "/v1/jobs/{cluster}/{job_id}/context"), ("GET", "/v1/jobs/{cluster}/{job_id}/verdict"),
              ("GET", "/v1/nodes/{cluster}/{node}/events"), ("GET", "/v1/recurring-faults"),
              ("GET", "/v1/drain-candidates"), ("POST", "/v1/diagnose")]


FUZZ_RUNS = [(m, p, mode) for m, p in OPERATIONS for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
             if not (p in ("/healthz", "/readyz") and mode == GenerationMode.NEGATIVE)]  # no input to break


@pytest.mark.slow
@pytest.mark.parametrize("method,path,mode", FUZZ_RUNS, ids=[f"{m} {p} {mode}" for m, p, mode in FUZZ_RUNS])
def test_schema_driven_requests_never_get_a_5xx(api_schema, service, method, path, mode):
    """Schemathesis generates requests from the OpenAPI description, valid ones and ones that break it, with the
    token of both scopes: up to 20 per operation and mode (320 in all); none may get a server error."""
    statuses = []

    @given(case=api_schema[path][method].as_strategy(mode))
    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case):
        r = case.call_and_validate(headers=service.auth("both"), checks=[not_a_server_error], timeout=60)
        statuses.append(r.status_code)

    run()
    assert statuses and max(statuses) < 500
    print(f"{method} {path} {mode}: {len(statuses)} requests, statuses {sorted(set(statuses))}")


# -- reporting --------------------------------------------------------------------------------------------------------

def test_posting_the_same_document_twice_changes_nothing(http, service, ruleset, db):
    data = pieces(ruleset, INCIDENTS / "03-xid94-contained-ecc")[0]
    first = post(http, service, data)
    assert first.status_code == 200, first.text
    before = job_counts(db, *job_of(data))
    again = post(http, service, data).json()
    assert again["new_events"] == 0 and again["linked_events"] == 0 and again["verdict_changed"] is False
    assert job_counts(db, *job_of(data)) == before


@pytest.mark.parametrize("bundle", ["01-xid79-fallen-off-bus", "04-xid74-nvlink", "05-nvswitch-fatal-sxid",
                                    "07-app-python-keyerror", "10-node-fail-no-logs"])
def test_a_job_reported_by_its_hooks_through_the_service_gets_the_diagnose_verdict(http, service, ruleset,
                                                                                   bundle):
    path = INCIDENTS / bundle
    parts = pieces(ruleset, path)
    for data in parts[1:] + parts[:1]:  # in an order other than the bundle's
        r = post(http, service, data)
        assert r.status_code == 200, r.text
    assert decision(verdict_of(http, service, *job_of(parts[-1]))) == decision(whole_verdict(ruleset, path))


def test_the_controller_context_alone_then_the_nodes_end_with_the_diagnose_verdict(http, service, ruleset):
    path = INCIDENTS / "08-slurm-oom-kill"
    parts = pieces(ruleset, path)
    ctrl = parts[-1]
    r = http.post(f"/v1/jobs/{ctrl['context']['cluster']}/{ctrl['context']['job_id']}/context?source=controller",
                  json=ctrl["context"], headers=service.auth("report"))
    assert r.status_code == 200, r.text
    for data in parts:
        assert post(http, service, data).status_code == 200
    assert decision(verdict_of(http, service, *job_of(ctrl))) == decision(whole_verdict(ruleset, path))


def test_a_node_fail_context_alone_names_the_failed_node(http, service):
    ctx = {"nodes": ["nf1", "nf2"], "state": "NODE_FAIL", "failed_node": "nf2", "exit_code": "0:0",
           "start": "2026-03-03T10:00:00Z", "end": "2026-03-03T12:00:00Z"}
    r = http.post("/v1/jobs/nfc/55/context?source=controller", json=ctx, headers=service.auth("report"))
    assert r.status_code == 200, r.text
    v = verdict_of(http, service, "nfc", "55")
    assert (v["outcome"], v["culprits"]) == ("host", [{"node": "nf2", "gpu": None, "evidence": "system"}])


def test_node_events_come_back_in_their_time_range(http, service, ruleset):
    path = INCIDENTS / "06-ib-link-down"
    for data in pieces(ruleset, path):
        assert post(http, service, data).status_code == 200
    root = whole_verdict(ruleset, path)["root_cause"]
    cluster = load_context(path / "context.yaml").cluster
    t = datetime.fromisoformat(root["time"].replace("Z", "+00:00"))
    q = {"since": (t - timedelta(seconds=1)).isoformat(), "until": (t + timedelta(seconds=1)).isoformat()}
    r = http.get(f"/v1/nodes/{cluster}/{root['node']}/events", params=q, headers=service.auth("read"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert any(e["kind"] == root["kind"] and e["time"] == root["time"] and e["jobs"] == 1 for e in got["events"])
    later = http.get(f"/v1/nodes/{cluster}/{root['node']}/events",
                     params={"since": (t + timedelta(days=1)).isoformat()}, headers=service.auth("read")).json()
    assert later["events"] == [] and later["truncated"] is False


def test_fleet_views_answer_as_rows(http, service):
    for path in ("/v1/recurring-faults", "/v1/drain-candidates?cluster=kestrel&limit=5"):
        r = http.get(path, headers=service.auth("read"))
        assert r.status_code == 200, r.text
        assert set(r.json()) == {"rows", "truncated"}


# -- 200 node reports at once -----------------------------------------------------------------------------------------

def _ctime(t: datetime) -> str:
    return f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}]"


def big_job_bundle(folder: Path, n_nodes: int = 200) -> Path:
    """A 200-node job: every node logs a row-remap notice (so every node report carries an event), one node's GPU
    falls off the bus, and every rank's NCCL watchdog times out after it."""
    start = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
    end = start + timedelta(hours=3)
    fault = end - timedelta(minutes=11)
    nodes = tuple(f"gpu{i:03d}" for i in range(1, n_nodes + 1))
    job = GeneratedJob("777001", "alice", nodes, start, end, "FAILED", "134:0", "gpu_hardware")
    for i, n in enumerate(nodes):
        job.kernel[n] = [
            f"{_ctime(start)} mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link ACTIVE",
            f"{_ctime(start + timedelta(minutes=5, seconds=i))} NVRM: Xid (PCI:0000:1b:00): 63, pid='<unknown>', "
            f"name=<unknown>, Row Remapping: New row (0x00000000000f1e2d) was marked for remapping, reset gpu to "
            f"activate."]
    job.kernel[nodes[116]].append(f"{_ctime(fault)} NVRM: Xid (PCI:0000:c3:00): 79, pid='<unknown>', "
                                  f"name=<unknown>, GPU has fallen off the bus.")
    t = fault + timedelta(minutes=10)
    job.job_output = [
        f"{r:2d}: [rank{r}]:[E{t.month}{t.day:02d} {t.strftime('%H:%M:%S')}.{r:06d}000 ProcessGroupNCCL.cpp:607] "
        f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, "
        f"NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600{r:03d} milliseconds before timing out."
        for r in range(n_nodes * 8)]
    return write_bundle(job, folder)


@pytest.mark.slow
def test_200_node_reports_posted_at_once_give_one_consistent_verdict_and_lose_nothing(service, ruleset, db,
                                                                                      tmp_path):
    bundle = big_job_bundle(tmp_path)
    parts = pieces(ruleset, bundle)
    nodes, controller = parts[:-1], parts[-1]
    assert len(nodes) == 200 and all(p["logs"][0]["blocks"] for p in nodes)

    def send(data):
        with httpx.Client(base_url=service.url, timeout=120) as c:
            return post(c, service, data)

    with ThreadPoolExecutor(len(parts)) as pool:
        answers = list(pool.map(send, nodes + [controller]))
    assert [a.status_code for a in answers if a.status_code != 200] == []
    d = diagnose_bundle(ruleset, bundle)
    with httpx.Client(base_url=service.url, timeout=60) as c:
        assert decision(verdict_of(c, service, "demo", "777001")) == decision(verdict_to_dict(d.verdict))
    counts = job_counts(db, "demo", "777001")
    assert counts["jobs"] == 1 and counts["coverage"] == len(d.coverage)
    assert sum(a.json()["linked_events"] for a in answers) == counts["events"]


# -- the hooks report through the service -----------------------------------------------------------------------------

@pytest.fixture
def hook_node(tmp_path, service):
    made = []

    def make(job_id: str, url: str | None = None, token: str | None = None) -> Node:
        n = Node(tmp_path / f"n{len(made)}", url or service.url, token or service.tokens["report"], job_id)
        made.append(n)
        return n
    yield make
    for n in made:
        n.close()


def test_a_node_reports_through_the_service_and_the_job_is_stored(http, service, hook_node):
    n = hook_node("99001")
    _, r = n.epilog()
    assert "stored" in r.stdout and n.spooled() == [], r.stdout + r.stderr
    assert verdict_of(http, service, "hard", "99001")["outcome"] == "gpu_hardware"


@pytest.mark.slow
def test_nodes_spool_when_the_service_is_away_and_spool_flush_sends_to_it(http, service, hook_node):
    n = hook_node("99002", url=f"http://127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    _, r = n.epilog(budget=5)
    assert "spooled to" in r.stdout and "error:" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 20  # within the hook's deadline
    n.write_hook_env(url=service.url)
    r = n.flush()
    assert r.returncode == 0 and "sent 1, left 0" in r.stdout, r.stdout + r.stderr
    assert verdict_of(http, service, "hard", "99002")["outcome"] == "gpu_hardware"


def test_a_node_spools_rather_than_use_a_token_others_can_read_or_a_wrong_token(service, hook_node):
    for i, (token, mode) in enumerate(((service.tokens["report"], 0o644), ("f" * 48, 0o600),
                                       (service.tokens["read"], 0o600))):
        n = hook_node(f"9901{i}", token=token)
        n.token_file.chmod(mode)
        _, r = n.epilog(budget=5)
        assert "stored" not in r.stdout and (n.spooled() or list((n.spool_dir / "bad").glob("*.spool"))), r.stdout


def test_a_spooled_document_the_service_refuses_for_good_is_set_aside(service, hook_node):
    n = hook_node("99020")
    spool.write(n.spool_dir, {"format": "attribution.observations/1", "reporter": {"role": "node", "name": "n1"}})
    r = n.flush()
    assert r.returncode == 0, r.stdout + r.stderr
    assert n.spooled() == []
    reasons = list((n.spool_dir / "bad").glob("*.reason"))
    assert len(reasons) == 1 and "HTTP 422" in reasons[0].read_text()


# -- diagnosing an uploaded bundle ------------------------------------------------------------------------------------

@pytest.mark.parametrize("top", ["bundle-folder", ""])
def test_an_uploaded_bundle_gets_the_diagnose_verdict_and_nothing_is_stored(http, service, ruleset, db, top):
    path = INCIDENTS / "05-nvswitch-fatal-sxid"
    with db.connect() as c:
        before = c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar()
    archive = bundle_targz(path, top=top or ".")
    r = http.post("/v1/diagnose", content=archive,
                  headers={**service.auth("read"), "Content-Type": "application/gzip"})
    assert r.status_code == 200, r.text
    assert r.json() == whole_verdict(ruleset, path)
    with db.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar() == before


def test_a_bundle_with_a_broken_context_names_the_file_inside_the_bundle(http, service):
    archive = targz({"context.yaml": b"cluster: c\njob_id: 1\nnodes: [n1]\nstart: not-a-time\n"}, top="b/")
    r = http.post("/v1/diagnose", content=archive,
                  headers={**service.auth("read"), "Content-Type": "application/gzip"})
    assert r.status_code == 422
    assert r.json()["message"].startswith("context.yaml: start:")


# -- starting the service ---------------------------------------------------------------------------------------------

def test_serve_refuses_a_tokens_file_others_can_read_or_none_at_all(tmp_path):
    tokens = tmp_path / "tokens"
    write_tokens(tokens)
    tokens.chmod(0o640)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"home": str(tmp_path / "home"), "database": {"url": "postgresql://nowhere/x"},
                                      "service": {"tokens_file": str(tokens)}}))
    r = CliRunner().invoke(main, ["--config", str(config), "serve"])
    assert r.exit_code == 2 and "readable by others" in r.output
    config.write_text(yaml.safe_dump({"home": str(tmp_path / "home")}))
    r = CliRunner().invoke(main, ["--config", str(config), "serve"])
    assert r.exit_code == 2 and "tokens_file" in r.output


def test_service_settings_are_checked_where_they_are_read():
    s = parse_settings({"service": {"listen": "0.0.0.0:9000", "max_body_bytes": 1024}}, "c.yaml")
    assert s.service.host_port() == ("0.0.0.0", 9000) and s.service.max_body_bytes == 1024
    assert parse_settings({}, "c.yaml").service.tokens_file is None  # older files stay valid
    for bad in ({"listen": "nowhere"}, {"max_body_bytes": 0}, {"workers": "many"}, {"colour": "blue"}):
        with pytest.raises(ConfigError):
            parse_settings({"service": bad}, "c.yaml")


def test_tokens_files_are_checked_line_by_line():
    from attribution.api.auth import parse_tokens

    table = parse_tokens("# comment\nreport " + "a" * 32 + " hooks\nread,report " + "b" * 32 + "\n", "t")
    assert table.lookup("a" * 32).scopes == {"report"} and table.lookup("b" * 32).name == "line 3"
    assert table.lookup("c" * 32) is None and table.lookup(None) is None
    for bad in ("admin " + "a" * 32, "report short", "report " + "a" * 32 + "\nread " + "a" * 32, "", "report"):
        with pytest.raises(ConfigError):
            parse_tokens(bad, "t")


def test_max_symptoms_lists_fewer_symptoms_like_the_command_line(http, service, ruleset):
    path = INCIDENTS / "01-xid79-fallen-off-bus"
    r = http.post("/v1/diagnose?max_symptoms=2", content=bundle_targz(path),
                  headers={**service.auth("read"), "Content-Type": "application/gzip"})
    assert r.status_code == 200, r.text
    assert r.json() == verdict_to_dict(diagnose_bundle(ruleset, path).verdict, symptom_limit=2)
