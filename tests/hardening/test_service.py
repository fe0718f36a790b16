"""The service's findings of issue 18, one regression test each, named after it: L1 (500s from /v1/diagnose),
M5 (links and per-request budgets), M6 (connection limit, header timeout), L8 (tokens file owner), L9 (report
tokens bound to a cluster), L6 (big report bodies parsed off the event loop). One service with small limits and
a low open-files limit serves them all."""

from __future__ import annotations

import io
import json
import os
import secrets
import socket
import tarfile
import time
import uuid
from datetime import datetime, timezone

import httpx
import pytest

from attribution.errors import ConfigError

from tests.harness.service import start_service

UTC = timezone.utc
BOUND = secrets.token_hex(24)
NODES = secrets.token_hex(24)  # cluster alpha's node token
OPEN_FILES = 256
LIMITS = {"max_upload_bytes": 2 * 1024 * 1024, "max_bundle_bytes": 4 * 1024 * 1024, "max_bundle_files": 3000,
          "diagnose_cpu_seconds": 3, "diagnose_wall_seconds": 120, "max_connections": 16,
          "header_timeout_seconds": 2, "request_timeout_seconds": 60}


@pytest.fixture(scope="module")
def service(pg_server, pg_template, tmp_path_factory):
    name = f"svc_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    svc = start_service(url, tmp_path_factory.mktemp("hard-service"), service=LIMITS,
                        extra_tokens=f"report {BOUND} prod-a-nodes cluster=prod-a\n"
                                     f"report {NODES} alpha-nodes cluster=alpha nodes=a[01-04]\n",
                        open_files=OPEN_FILES)
    try:
        yield svc
    finally:
        svc.stop()
        pg_server.drop_database(name)


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service.url, timeout=120) as c:
        yield c


def _tar(members: list[tuple[str | bytes, bytes | tuple[str, str]]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        for name, content in members:
            info = tarfile.TarInfo(os.fsdecode(name) if isinstance(name, bytes) else name)
            if isinstance(content, tuple):
                info.type = {"dir": tarfile.DIRTYPE, "hardlink": tarfile.LNKTYPE,
                             "symlink": tarfile.SYMTYPE}[content[0]]
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def _context(**over) -> bytes:
    ctx = {"cluster": "prod-a", "job_id": "1", "nodes": ["n1"], "state": "FAILED",
           "start": "2026-10-01T12:00:00Z", "end": "2026-10-01T13:00:00Z"}
    ctx.update(over)
    return json.dumps(ctx).encode()


def _diagnose(http, service, body: bytes) -> httpx.Response:
    return http.post("/v1/diagnose", content=body, headers={**service.auth("read"), "Content-Type": "application/gzip"})


# -- L1 ---------------------------------------------------------------------------------------------------------------

L1_ARCHIVES = {
    "non-UTF-8 member name": [("context.yaml", _context()), (b"job/slurm-\xff\xfe.out", b"KeyError: 'x'\n")],
    "2,000 nested folders": [("context.yaml", _context()), ("/".join(["d"] * 2000) + "/f", b"x")],
    "end 9999-12-31T23:59:59Z": [("context.yaml", _context(end="9999-12-31T23:59:59Z"))],
    "start 0001-01-01": [("context.yaml", _context(start="0001-01-01T00:00:00Z"))],
}


@pytest.mark.parametrize("name", list(L1_ARCHIVES))
def test_l1_diagnose_answers_4xx_not_500(http, service, name):
    r = _diagnose(http, service, _tar(L1_ARCHIVES[name]))
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["message"]


def test_l1_a_context_ending_in_9999_is_a_4xx(http, service):
    r = http.post("/v1/jobs/prod-a/5/context", headers=service.auth("report"),
                  json={"nodes": ["n1"], "state": "FAILED", "start": "2026-10-01T12:00:00Z",
                        "end": "9999-12-31T23:59:59Z"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)


# -- M5 ---------------------------------------------------------------------------------------------------------------


def test_m5_hardlinks_count_at_the_size_of_their_target(http, service):
    big = b"x" * (1024 * 1024)
    members = [("context.yaml", _context()), ("job/0.out", big)]
    members += [(f"job/{i}.out", ("hardlink", "job/0.out")) for i in range(1, 100)]
    r = _diagnose(http, service, _tar(members))
    assert r.status_code == 422 and "bytes" in r.json()["message"], r.text


def test_m5_symlinks_to_folders_and_files_are_bounded_too(http, service):
    big = b"x" * (1024 * 1024)
    members = [("context.yaml", _context()), ("job/0.out", big)]
    members += [(f"job/{i}.out", ("symlink", "0.out")) for i in range(1, 100)]
    r = _diagnose(http, service, _tar(members))
    assert r.status_code == 422 and "bytes" in r.json()["message"], r.text
    members = [("context.yaml", _context()), ("nodes/n1/kernel.log", b""), ("nodes/n2", ("symlink", "n1"))]
    r = _diagnose(http, service, _tar(members))
    assert r.status_code == 422 and "link to a folder" in r.json()["message"], r.text


# waits for a diagnosis to use up its CPU-time budget
@pytest.mark.slow
def test_m5_a_bundle_that_needs_more_cpu_than_the_budget_is_refused(http, service):
    line = b"[Tue Oct  1 12:30:00 2026] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, Graphics Exception\n"
    kernel = line * ((LIMITS["max_bundle_bytes"] - 4096) // len(line))
    r = _diagnose(http, service, _tar([("context.yaml", _context()), ("nodes/n1/kernel.log", kernel)]))
    assert r.status_code == 422 and "CPU" in r.json()["message"], r.text


def test_m5_a_small_bundle_is_diagnosed_within_the_budget(http, service):
    r = _diagnose(http, service, _tar([("context.yaml", _context()), ("job/out", b"KeyError: 'x'\n")]))
    assert r.status_code == 200, r.text
    assert r.json()["job"]["cluster"] == "prod-a"


# -- M6 ---------------------------------------------------------------------------------------------------------------


def test_m6_healthz_stays_up_under_many_idle_partial_header_connections(service):
    """More idle connections than the server may open files: past max_connections the oldest one still waiting
    for its headers is closed, so /healthz gets in (without the limit the server ran out of descriptors)."""
    held = []
    try:
        for _ in range(OPEN_FILES + 50):
            s = socket.create_connection(("127.0.0.1", int(service.url.rsplit(":", 1)[1])), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
            held.append(s)
        r = httpx.get(service.url + "/healthz", timeout=30)
        assert r.status_code == 200
    finally:
        for s in held:
            s.close()


def test_m6_headers_must_arrive_within_the_header_timeout(service):
    s = socket.create_connection(("127.0.0.1", int(service.url.rsplit(":", 1)[1])), timeout=60)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        assert s.recv(1) == b""  # closed by the server (after 2 s) without an answer
    finally:
        s.close()


# -- L8 / L9 ----------------------------------------------------------------------------------------------------------


def test_l8_a_tokens_file_owned_by_another_user_is_refused(tmp_path):
    from attribution.api.auth import load_tokens

    p = tmp_path / "tokens"
    p.write_text(f"report {secrets.token_hex(24)} hooks\n")
    p.chmod(0o600)
    assert load_tokens(p)
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(p, os.geteuid() + 4242, -1)
    with pytest.raises(ConfigError, match="belongs to uid"):
        load_tokens(p)


def _batch(cluster: str, job: str, node: str = "n1", nodelist: str | None = None) -> dict:
    """A node's observation document (node/document.py) of one job, one kernel line kept."""
    now = datetime.now(UTC).replace(microsecond=0)
    return {"format": "attribution.observations/1",
            "reporter": {"role": "node", "name": node, "agent": "test", "filter": None}, "cluster": cluster,
            "slurm": {"SLURM_JOB_ID": job, "SLURMD_NODENAME": node, "SLURM_NODELIST": nodelist or node,
                      "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_START_TIME": str(int(now.timestamp()) - 3600),
                      "SLURM_JOB_END_TIME": str(int(now.timestamp()))},
            "times": {"now": now.timestamp(), "zone": "UTC"},
            "logs": [{"source": "kernel", "origin": "journald", "status": "ok", "lines": 1, "bytes": 80,
                      "blocks": [[1, [f"{now.isoformat()} {node} kernel: usb 1-1: quiet"]]], "cut": False}]}


def test_l9_a_report_token_bound_to_a_cluster_reports_that_cluster_only(http, service):
    bound = {"Authorization": f"Bearer {BOUND}"}
    assert http.post("/v1/observations", json=_batch("prod-a", "11"), headers=bound).status_code == 200
    r = http.post("/v1/observations", json=_batch("prod-b", "12"), headers=bound)
    assert r.status_code == 403 and "prod-a" in r.json()["message"]
    r = http.post("/v1/jobs/prod-b/13/context", headers=bound,
                  json={"nodes": ["n1"], "state": "FAILED", "start": "2026-10-01T12:00:00Z",
                        "end": "2026-10-01T13:00:00Z"})
    assert r.status_code == 403
    # an unbound report token still reports any cluster
    assert http.post("/v1/observations", json=_batch("prod-b", "14"), headers=service.auth("report")
                     ).status_code == 200


def test_a_node_token_speaks_for_its_nodes_only_and_every_refusal_is_counted(http, service):
    """#28: with cluster alpha's node token (`nodes=a[01-04]`), no report can make a verdict, a drain plan or a page
    name a job of another cluster or a node outside the token's list, and each refusal is counted in /metrics."""
    node = {"Authorization": f"Bearer {NODES}"}
    before = _refused(http)
    assert http.post("/v1/observations", json=_batch("alpha", "21", "a02", "a[01-04]"), headers=node
                     ).status_code == 200
    attempts = [_batch("alpha", "22", "b01"), _batch("beta", "23", "a02"), _batch("alpha", "24", "a02", "a02,b07"),
                _batch("alpha", "25", "a02", "a[01-99]")]
    for doc in attempts:
        r = http.post("/v1/observations", json=doc, headers=node)
        assert r.status_code == 403, r.text
    ctrl = {"format": "attribution.observations/1", "reporter": {"role": "controller", "name": "x"},
            "cluster": "alpha", "context": {"cluster": "alpha", "job_id": "26", "nodes": ["a01"], "state": "FAILED",
                                            "start": "2026-10-01T12:00:00Z", "end": "2026-10-01T13:00:00Z"}}
    assert http.post("/v1/observations", json=ctrl, headers=node).status_code == 403  # only node reports
    r = http.post("/v1/jobs/alpha/27/context", json={"nodes": ["a01"], "state": "NODE_FAIL", "failed_node": "a01",
                                                      "start": "2026-10-01T12:00:00Z", "end": "2026-10-01T13:00:00Z"},
                  headers=node)
    assert r.status_code == 403
    after = _refused(http)
    assert after["node"] - before["node"] == 5 and after["cluster"] - before["cluster"] == 1
    for cluster, job in (("alpha", j) for j in ("22", "24", "25", "26", "27")):
        assert http.get(f"/v1/jobs/{cluster}/{job}/verdict", headers=service.auth("read")).status_code == 404
    assert http.get("/v1/jobs/beta/23/verdict", headers=service.auth("read")).status_code == 404


def _refused(http) -> dict[str, float]:
    out = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("attribution_reports_refused_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def test_l9_the_tokens_file_syntax_for_a_bound_token():
    from attribution.api.auth import parse_tokens

    t = secrets.token_hex(24)
    table = parse_tokens(f"report {t} nodes cluster=prod-a\nread {secrets.token_hex(24)}\n", "tokens")
    assert table.lookup(t).cluster == "prod-a" and table.lookup(t).may_report("prod-a")
    assert not table.lookup(t).may_report("prod-b")
    with pytest.raises(ConfigError, match="cluster=NAME"):
        parse_tokens(f"report {t} nodes cluster=\n", "tokens")


# -- L6 ---------------------------------------------------------------------------------------------------------------


def _big_batch(cluster: str, size: int) -> bytes:
    """A valid observation document of just under `size` bytes: one node's kernel lines, each distinct."""
    doc = _batch(cluster, "16")
    line = "2026-10-01T12:30:00+0000 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, " + "x" * 20
    one = len(json.dumps(line)) + 2
    lines = [f"{line} {i}" for i in range((size - 4096) // (one + 8))]
    doc["logs"][0]["blocks"] = [[1, lines]]
    body = json.dumps(doc).encode()
    assert len(body) <= size
    return body


def _queues(port: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(local port, remote port) -> (send queue, receive queue) of this host's IPv4 TCP sockets on `port`:
    what the kernel holds that the sender has not handed over or the receiving program has not read yet."""
    out = {}
    with open("/proc/net/tcp") as f:
        for row in f.read().splitlines()[1:]:
            cols = row.split()
            local, remote = (int(cols[i].rsplit(":", 1)[1], 16) for i in (1, 2))
            if port in (local, remote):
                tx, rx = (int(q, 16) for q in cols[4].split(":"))
                out[(local, remote)] = (tx, rx)
    return out


def _read_by_the_server(port: int, clients: list[socket.socket]) -> bool:
    q = _queues(port)
    mine = [s.getsockname()[1] for s in clients]
    return all(q.get((c, port), (1, 0))[0] == 0 and q.get((port, c), (0, 1))[1] == 0 for c in mine)


@pytest.mark.slow
def test_l6_healthz_is_answered_while_big_report_bodies_are_parsed(service):
    """Four 16 MB observation documents at once, each refused only once it is parsed: a token bound to prod-a
    posting prod-b gets its 403 after the whole body is decoded and checked by the codec, and no database work
    follows. The bodies arrive but for their last byte; once the server has read all the rest (the kernel holds
    none of it: /proc/net/tcp), the last bytes go, and /healthz is asked again and again, each time once the
    previous answer came. Counted by events: how many /healthz answers came before the first 403. Parsed on
    the event loop (before the fix) it was 1: each body held the loop for seconds, and the finding saw /healthz
    take 3 s and other clients' bodies time out with 408. Parsed in the body-parsing lane's threads it is
    several: json.loads holds the interpreter for the whole of a body (a 16 MB body of long lines left room for
    two answers on a fast idle machine), the codec's checks of each line give it back every few milliseconds, so
    the bodies are made of short lines (~160,000 each), where the checks are most of the work: 4-6 answers before
    the first 403 on the same machine, and three before the last one's is the bound."""
    import selectors

    port = int(service.url.rsplit(":", 1)[1])
    body = _big_batch("prod-b", 16 * 1024 * 1024)
    head = (f"POST /v1/observations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOUND}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    deadline = time.monotonic() + 300  # a bound on a broken server, not the measure
    sel = selectors.DefaultSelector()
    names: dict[socket.socket, str] = {}
    big = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(4)]
    answers: dict[str, bytes] = {}
    healthz, healthz_before, pending = 0, [], [b""]

    def ask_healthz() -> None:
        h = socket.create_connection(("127.0.0.1", port), timeout=120)
        h.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        names[h] = "healthz"
        sel.register(h, selectors.EVENT_READ)

    try:
        for s in big:  # every request's headers first: they must arrive within header_timeout_seconds (2 s)
            s.sendall(head)
        for s in big:
            s.sendall(body[:-1])
        while not _read_by_the_server(port, big):
            assert time.monotonic() < deadline, _queues(port)
            time.sleep(0.01)
        for i, s in enumerate(big):
            s.sendall(body[-1:])
            names[s] = f"batch {i}"
            sel.register(s, selectors.EVENT_READ)
        ask_healthz()
        while len(answers) < len(big) or any(names[k.fileobj] != "healthz" for k in sel.get_map().values()):
            events = sel.select(timeout=max(0.0, deadline - time.monotonic()))
            assert events, f"no answer within the bound: {healthz} /healthz, {sorted(answers)}"
            for key, _ in events:
                s = key.fileobj
                chunk = s.recv(65536)
                if names[s] == "healthz":
                    pending[0] += chunk
                    if not chunk:  # one answer complete: ask again while the batches are parsed
                        assert pending[0].startswith(b"HTTP/1.1 200 "), pending[0]
                        pending[0] = b""
                        sel.unregister(s)
                        s.close()
                        healthz += 1
                        if len(answers) < len(big):
                            ask_healthz()
                    continue
                if names[s] not in answers:  # the first bytes of this batch's answer
                    healthz_before.append(healthz)
                    answers[names[s]] = b""
                answers[names[s]] += chunk
                if not chunk:
                    sel.unregister(s)
    finally:
        for s in list(names) + big:
            s.close()
    status = {name: answer.split(b" ", 2)[1] for name, answer in answers.items()}
    assert status == {f"batch {i}": b"403" for i in range(4)}, answers
    # while the four are decoded (in the parsing lane's threads: json.loads, then the codec's checks, which give the
    # interpreter back every few milliseconds), /healthz keeps being answered
    assert healthz_before[-1] >= 3, f"/healthz answers before each batch's: {healthz_before}"
