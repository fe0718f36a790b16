"""The Attribution Service (attribution serve) running as a real server on a real PostgreSQL: authentication,
4xx for bad input, schema-driven fuzzing, idempotent reports, a 200-node job reported at once, the hooks
reporting through it, and uploaded bundles diagnosed without storing them."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
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
from sqlalchemy import create_engine, text

from attribution.node import spool
from attribution.cli import main
from attribution.config import Settings, parse_settings
from attribution.node.epilog import HookReport, payload, store_or_spool
from attribution.errors import ConfigError
from attribution.fleetgen import GeneratedJob, write_bundle
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict
from attribution.scope.bundle import load_context

from tests.conftest import INCIDENTS
from tests.harness.pg import free_port
from tests.harness.service import start_service, write_tokens

UTC = timezone.utc
SERVICE_LIMITS = {"max_body_bytes": 8 * 1024 * 1024, "max_upload_bytes": 2 * 1024 * 1024,
                  "max_bundle_files": 300, "max_bundle_bytes": 16 * 1024 * 1024,
                  "request_timeout_seconds": 120}  # a slow machine still takes 200 reports of one job at once


# -- fixtures -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def service_db(pg_server, pg_template):
    name = f"svc_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
def service(service_db, tmp_path_factory):
    svc = start_service(service_db, tmp_path_factory.mktemp("service"), service=SERVICE_LIMITS)
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def db(service_db):
    engine = create_engine(service_db)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service.url, timeout=60) as c:
        yield c


# -- helpers ----------------------------------------------------------------------------------------------------------

def pieces(ruleset, bundle: Path) -> list[dict]:
    """The payloads the hooks would send for a bundle: one per node (its own kernel and Fabric Manager events,
    a provisional context with state unknown), and the controller's (the job output and the final context).
    Same split as tests/store/test_store.py."""
    ctx = load_context(bundle / "context.yaml")
    d = diagnose_bundle(ruleset, bundle)
    node_ctx = type(ctx)(cluster=ctx.cluster, job_id=ctx.job_id, nodes=ctx.nodes, state="UNKNOWN",
                         start=ctx.start + timedelta(seconds=3), end=ctx.end + timedelta(seconds=1),
                         boot_time=ctx.boot_time, timezone=ctx.timezone)
    out = []
    node_sources = ("kernel", "fabricmanager", "node")
    for node in ctx.nodes:
        evs = [e for e in d.events if e.node == node and e.source in node_sources]
        cov = [c for c in d.coverage if c.node == node and c.source in node_sources]
        out.append(payload(node_ctx, evs, cov, "node"))
    evs = [e for e in d.events if e.source in ("job", "scheduler")]
    cov = [c for c in d.coverage if c.source == "job"]
    out.append(payload(ctx, evs, cov, "controller"))
    return out


def whole_verdict(ruleset, bundle: Path) -> dict:
    return verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)


def verdict_of(http, service, cluster: str, job_id: str) -> dict:
    r = http.get(f"/v1/jobs/{cluster}/{job_id}/verdict", headers=service.auth("read"))
    assert r.status_code == 200, r.text
    return r.json()


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
        body = {"type": "ingest", "source": "node", "events": [], "coverage": [],
                "context": {"cluster": "authc", "job_id": "1", "nodes": ["n1"], "state": "FAILED",
                            "start": "2026-01-05T10:00:00Z", "end": "2026-01-05T11:00:00Z"}}
        return http.post(path, json=body, headers=headers)
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
GOOD_EVENT = {"kind": "gpu_fallen_off_bus", "role": "cause", "rule": "kernel.xid", "source": "kernel",
              "location": "kernel:1", "line": "NVRM: Xid (PCI:0000:3b:00): 79", "message": "xid 79",
              "node": "n1", "gpu": "0000:3b:00", "code": 79, "time": "2026-02-02T10:30:00Z"}


def _batch(**over) -> dict:
    d = {"type": "ingest", "source": "node", "context": dict(GOOD_CONTEXT), "events": [dict(GOOD_EVENT)],
         "coverage": [{"source": "kernel", "node": "n1", "status": "ok", "lines": 10}]}
    d.update(over)
    return d


MALFORMED_BATCHES = {
    "not JSON": b"{\"type\": ",
    "a list": b"[1, 2]",
    "NaN code": json.dumps(_batch()).replace('"code": 79', '"code": NaN').encode(),
    "deeply nested": b"[" * 100000 + b"]" * 100000,
    "no context": _batch(context=None),
    "context without nodes": _batch(context={"cluster": "bad", "job_id": "7"}),
    "an unknown field": _batch(extra=1),
    "unknown payload type": _batch(type="delete"),
    "unknown source": _batch(source="root"),
    "a role that is not one": _batch(events=[dict(GOOD_EVENT, role="boss")]),
    "NUL in a line": _batch(events=[dict(GOOD_EVENT, line="a\u0000b")]),
    "a lone surrogate": json.dumps(_batch(events=[dict(GOOD_EVENT, line="\ud800")])).encode(),
    "a code past int32": _batch(events=[dict(GOOD_EVENT, code=2**40)]),
    "a time that is not one": _batch(events=[dict(GOOD_EVENT, time="yesterday")]),
    "a time in year 1": _batch(events=[dict(GOOD_EVENT, time="0001-01-01T00:00:00+01:00")]),
    "a time in year 9999": _batch(events=[dict(GOOD_EVENT, time="9999-12-31T23:59:59Z")]),
    "end before start": _batch(context=dict(GOOD_CONTEXT, end="2026-02-01T00:00:00Z")),
    "an unknown time zone": _batch(context=dict(GOOD_CONTEXT, timezone="Mars/Olympus")),
    "a hostlist to expand": _batch(context=dict(GOOD_CONTEXT, nodes=["n[1-99999]"])),
    "an event without kind": _batch(events=[{k: v for k, v in GOOD_EVENT.items() if k != "kind"}]),
    "coverage with a bad status": _batch(coverage=[{"source": "kernel", "status": "great"}]),
    "negative tasks per node": _batch(context=dict(GOOD_CONTEXT, tasks_per_node=-1)),
    "fields with a NaN": json.dumps(_batch(events=[dict(GOOD_EVENT, fields={"x": 1})])).replace(
        '"x": 1', '"x": NaN').encode(),
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
    r = http.post("/v1/observations", content=json.dumps(_batch()).encode(),
                  headers={**service.auth("report"), "Content-Type": "text/plain"})
    assert r.status_code == 422 and "application/json" in r.json()["message"]


def test_a_body_that_is_empty_or_not_json_is_refused_with_a_message(http, service):
    """The bodies are parsed off the event loop (api/bodies.py) with the answers FastAPI gives a declared body."""
    rep = {**service.auth("report"), "Content-Type": "application/json"}
    for path in ("/v1/observations", "/v1/jobs/bad/7/context"):
        r = http.post(path, content=b"", headers=rep)
        assert r.status_code == 422 and r.json()["message"] == "body: Field required", r.text
        r = http.post(path, content=b'{"events": [1, ', headers=rep)
        assert r.status_code == 422 and r.json()["message"].startswith("body: not valid JSON ("), r.text
        r = http.post(path, content=b'{"nodes": ["n1"]}', headers=service.auth("report"))  # no Content-Type
        assert r.status_code == 422 and "application/json" in r.json()["message"], r.text
    r = http.post("/v1/observations", content=json.dumps(_batch(events=[dict(GOOD_EVENT, code="x")])).encode(),
                  headers=rep)
    assert r.status_code == 422 and r.json()["message"].startswith("events.0.code: "), r.text


def test_a_body_over_the_limit_is_refused_with_413_declared_or_streamed(http, service):
    big = _batch(events=[dict(GOOD_EVENT, line="x" * 1000, location=f"k:{i}") for i in range(9000)])
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

def test_posting_the_same_batch_twice_changes_nothing(http, service, ruleset, db):
    data = pieces(ruleset, INCIDENTS / "03-xid94-contained-ecc")[0]
    first = post(http, service, data)
    assert first.status_code == 200, first.text
    before = job_counts(db, data["context"]["cluster"], data["context"]["job_id"])
    again = post(http, service, data).json()
    assert again["new_events"] == 0 and again["linked_events"] == 0 and again["verdict_changed"] is False
    assert job_counts(db, data["context"]["cluster"], data["context"]["job_id"]) == before


@pytest.mark.parametrize("bundle", ["01-xid79-fallen-off-bus", "04-xid74-nvlink", "05-nvswitch-fatal-sxid",
                                    "07-app-python-keyerror", "10-node-fail-no-logs"])
def test_a_job_reported_by_its_hooks_through_the_service_gets_the_diagnose_verdict(http, service, ruleset,
                                                                                   bundle):
    path = INCIDENTS / bundle
    parts = pieces(ruleset, path)
    for data in parts[1:] + parts[:1]:  # in an order other than the bundle's
        r = post(http, service, data)
        assert r.status_code == 200, r.text
    ctx = parts[-1]["context"]
    assert verdict_of(http, service, ctx["cluster"], ctx["job_id"]) == whole_verdict(ruleset, path)


def test_the_controller_context_alone_then_the_nodes_end_with_the_diagnose_verdict(http, service, ruleset):
    path = INCIDENTS / "08-slurm-oom-kill"
    parts = pieces(ruleset, path)
    ctrl = parts[-1]
    r = http.post(f"/v1/jobs/{ctrl['context']['cluster']}/{ctrl['context']['job_id']}/context?source=controller",
                  json=ctrl["context"], headers=service.auth("report"))
    assert r.status_code == 200, r.text
    for data in parts:
        assert post(http, service, data).status_code == 200
    assert verdict_of(http, service, ctrl["context"]["cluster"], ctrl["context"]["job_id"]) == \
        whole_verdict(ruleset, path)


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
    assert len(nodes) == 200 and all(p["events"] for p in nodes)

    def send(data):
        with httpx.Client(base_url=service.url, timeout=120) as c:
            return post(c, service, data)

    with ThreadPoolExecutor(len(parts)) as pool:
        answers = list(pool.map(send, nodes + [controller]))
    assert [a.status_code for a in answers if a.status_code != 200] == []
    d = diagnose_bundle(ruleset, bundle)
    with httpx.Client(base_url=service.url, timeout=60) as c:
        assert verdict_of(c, service, "demo", "777001") == verdict_to_dict(d.verdict)
    counts = job_counts(db, "demo", "777001")
    assert counts == {"jobs": 1, "events": len(d.events), "coverage": len(d.coverage)}
    assert sum(a.json()["linked_events"] for a in answers) == len(d.events)


# -- the hooks report through the service -----------------------------------------------------------------------------

def hook_settings(tmp_path: Path, service_url: str, token: str, mode: int = 0o600) -> Settings:
    tmp_path.mkdir(parents=True, exist_ok=True)
    token_file = tmp_path / "report.token"
    token_file.write_text(token + "\n")
    token_file.chmod(mode)
    return replace(Settings(home=tmp_path / "home"), service_url=service_url, service_token_file=str(token_file))


def _model_pieces(ruleset, bundle: Path):
    from attribution.serialize import context_from_json, coverage_from_json, event_from_json

    for data in pieces(ruleset, bundle):
        yield (context_from_json(data["context"]), [event_from_json(e) for e in data["events"]],
               [coverage_from_json(c) for c in data["coverage"]], data["source"])


def _no_database():
    raise AssertionError("the hook opened the database although service_url is set")


def test_hooks_store_through_the_service_when_service_url_is_set(http, service, ruleset, tmp_path):
    path = INCIDENTS / "02-xid48-dbe-ecc-xid31"
    settings = hook_settings(tmp_path, service.url, service.tokens["report"])
    for ctx, evs, cov, source in _model_pieces(ruleset, path):
        report = HookReport(source, ctx.job_id)
        store_or_spool(ruleset, _no_database, settings, ctx, evs, cov, source, time.monotonic() + 10, report)
        assert report.stored and report.spooled is None and report.error is None
    ctx = load_context(path / "context.yaml")
    assert verdict_of(http, service, ctx.cluster, ctx.job_id) == whole_verdict(ruleset, path)


@pytest.mark.slow
def test_hooks_spool_when_the_service_is_away_and_spool_flush_replays_to_it(http, service, ruleset, tmp_path):
    path = INCIDENTS / "12-lustre-eviction-io-error"
    away = hook_settings(tmp_path, f"http://127.0.0.1:{free_port()}", service.tokens["report"])
    t0 = time.monotonic()
    for ctx, evs, cov, source in _model_pieces(ruleset, path):
        report = HookReport(source, ctx.job_id)
        store_or_spool(ruleset, _no_database, away, ctx, evs, cov, source, time.monotonic() + 3, report)
        assert not report.stored and report.spooled is not None and "ServiceError" in report.error
    assert time.monotonic() - t0 < 20  # within the hooks' deadlines
    n = len(spool.pending(away.spool))
    assert n == len(load_context(path / "context.yaml").nodes) + 1
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"home": str(away.home), "service_url": service.url,
                                      "service_token_file": away.service_token_file}))
    r = CliRunner().invoke(main, ["--config", str(config), "spool", "flush"])
    assert r.exit_code == 0, r.output
    assert f"replayed {n}, left 0" in r.output
    ctx = load_context(path / "context.yaml")
    assert verdict_of(http, service, ctx.cluster, ctx.job_id) == whole_verdict(ruleset, path)


def test_hooks_spool_rather_than_use_a_token_others_can_read_or_a_wrong_token(service, ruleset, tmp_path):
    ctx, evs, cov, source = next(_model_pieces(ruleset, INCIDENTS / "09-slurm-timeout-no-fault"))
    for i, (token, mode) in enumerate(((service.tokens["report"], 0o644), ("f" * 48, 0o600),
                                       (service.tokens["read"], 0o600))):
        settings = hook_settings(tmp_path / str(i), service.url, token, mode)
        report = HookReport(source, ctx.job_id)
        store_or_spool(ruleset, _no_database, settings, ctx, evs, cov, source, time.monotonic() + 5, report)
        assert not report.stored and report.spooled is not None, report.line()


def test_a_spooled_payload_the_service_refuses_for_good_is_moved_aside(service, tmp_path):
    settings = hook_settings(tmp_path, service.url, service.tokens["report"])
    spool.write(settings.spool, {"type": "ingest", "source": "node", "context": {"cluster": "x"}})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"home": str(settings.home), "service_url": service.url,
                                      "service_token_file": settings.service_token_file}))
    r = CliRunner().invoke(main, ["--config", str(config), "spool", "flush"])
    assert r.exit_code == 0, r.output
    assert spool.pending(settings.spool) == []
    reasons = list((settings.spool / "bad").glob("*.reason"))
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
