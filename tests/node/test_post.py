"""node.post, the node's client of the service (http.client and ssl): what counts as taken, what is worth asking
again while time remains, what the service refused for good (the spool sets it aside), and TLS that verifies the
service's certificate against the node's CA bundle and its name."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from attribution.node.post import Client, Refused, Unreachable, read_token

TOKEN = "t" * 32


class Service:
    """A real HTTP(S) server on 127.0.0.1 answering each POST with the next (status, body, headers) of `answers`."""

    def __init__(self, answers, tls: ssl.SSLContext | None = None) -> None:
        self.answers = iter(answers)
        self.seen: list[tuple[str, str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((self.path, self.headers.get("Authorization"), json.loads(body)))
                status, answer, headers = next(outer.answers)
                data = json.dumps(answer).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    made = []

    def make(*answers, tls=None):
        s = Service(answers, tls)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """Two CAs, and a certificate for 127.0.0.1 signed by the first (real openssl)."""
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ca}",
                 "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=attribution-service", "-keyout",
             str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.ext"), "-out", str(d / "server.pem"))
    return {name: d / f"{name}.pem" for name in ("ca", "other-ca", "server")} | {"key": d / "server.key"}


def server_tls(pki) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"], pki["key"])
    return ctx


def test_a_2xx_is_taken_and_the_token_is_sent(service):
    s = service((200, {"verdict_changed": True}, {}))
    assert Client(s.url, TOKEN).post({"format": "x"}, time.monotonic() + 10) == {"verdict_changed": True}
    assert s.seen == [("/v1/observations", "Bearer " + TOKEN, {"format": "x"})]


def test_a_busy_service_is_asked_again_while_time_remains(service):
    s = service((503, {"message": "busy"}, {"Retry-After": "0"}), (200, {}, {}))
    assert Client(s.url, TOKEN).post({}, time.monotonic() + 10) == {}
    assert len(s.seen) == 2


@pytest.mark.parametrize("status", [400, 403, 413, 415, 422])
def test_a_document_refused_for_good_is_refused_at_once(service, status):
    s = service(*[(status, {"error": "x", "message": "logs[0].source: bad"}, {})] * 3)
    with pytest.raises(Refused, match="logs\\[0\\].source: bad") as e:
        Client(s.url, TOKEN).post({}, time.monotonic() + 10)
    assert e.value.status == status and len(s.seen) == 1


@pytest.mark.parametrize("status", [401, 500])
def test_auth_and_server_errors_keep_the_document_for_later(service, status):
    s = service(*[(status, {"message": "no"}, {})] * 3)
    with pytest.raises(Unreachable, match=f"HTTP {status}: no"):
        Client(s.url, TOKEN).post({}, time.monotonic() + 10)


def test_an_unreachable_service_gives_up_within_the_deadline():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="Connection refused|ConnectionRefusedError"):
            Client(url, TOKEN).post({}, time.monotonic() + 1.0)
        assert time.monotonic() - t0 < 5  # the deadline (1 s), not the three attempts' sum of timeouts
        with pytest.raises(Unreachable, match="no time left"):
            Client(url, TOKEN).post({}, time.monotonic())


def test_a_service_that_never_answers_is_cut_off_at_the_deadline():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # accepts connections (the kernel does), never reads or answers
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="timed out"):
            Client(url, TOKEN, attempts=1).post({}, time.monotonic() + 1.0)
        assert time.monotonic() - t0 < 5


def test_tls_is_verified_against_the_named_ca_and_the_address(service, pki):
    s = service(*[(200, {"ok": 1}, {})] * 3, tls=server_tls(pki))
    assert Client(s.url, TOKEN, ca_file=str(pki["ca"])).post({}, time.monotonic() + 10) == {"ok": 1}
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        Client(s.url, TOKEN, ca_file=str(pki["other-ca"]), attempts=1).post({}, time.monotonic() + 10)
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        Client(s.url, TOKEN, attempts=1).post({}, time.monotonic() + 10)  # the system's CAs never signed it
    assert len(s.seen) == 1  # nothing was sent over the connections that failed verification
    localhost = s.url.replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED|match|mismatch"):
        Client(localhost, TOKEN, ca_file=str(pki["ca"]), attempts=1).post({}, time.monotonic() + 10)


def test_only_http_and_https_urls():
    for url in ("ftp://x", "x", "https://"):
        with pytest.raises(Unreachable, match="not an http"):
            Client(url, TOKEN)


def test_the_token_file_must_be_private_and_a_regular_file(tmp_path):
    f = tmp_path / "token"
    f.write_text("s" * 32 + "\n")
    f.chmod(0o644)
    with pytest.raises(Unreachable, match="readable by others"):
        read_token(str(f))
    f.chmod(0o600)
    assert read_token(str(f)) == "s" * 32
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(Unreachable, match="cannot read"):
        read_token(str(link))
    with pytest.raises(Unreachable, match="cannot read"):
        read_token(str(tmp_path / "none"))
