"""The hooks' client of the service: what counts as stored, what is worth retrying within the deadline, and what
the service refused for good (so the spool moves it aside instead of retrying it forever)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from attribution.config import Settings
from attribution.errors import ConfigError
from attribution.node.service_client import ServiceClient, ServiceError, ServiceRejected, client_from_settings


class Service:
    """A real HTTP server on 127.0.0.1 answering each POST with the next (status, body, headers) of `answers`."""

    def __init__(self, answers) -> None:
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
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    made = []

    def make(*answers):
        s = Service(answers)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def client(url: str, **kw) -> ServiceClient:
    return ServiceClient(url, "t" * 32, **kw)


def test_a_2xx_is_stored_and_the_token_is_sent(service):
    s = service((200, {"verdict_changed": True}, {}))
    assert client(s.url).post_observations({"type": "ingest"}) == {"verdict_changed": True}
    assert s.seen == [("/v1/observations", "Bearer " + "t" * 32, {"type": "ingest"})]


def test_a_busy_service_is_retried_while_time_remains(service):
    s = service((503, {"message": "busy"}, {"Retry-After": "0"}), (200, {}, {}))
    assert client(s.url).post_observations({}, deadline=time.monotonic() + 5) == {}
    assert len(s.seen) == 2


@pytest.mark.parametrize("status", [400, 413, 415, 422])
def test_a_payload_refused_for_good_raises_rejected_at_once(service, status):
    s = service(*[(status, {"error": "x", "message": "events.0.role: bad"}, {})] * 3)
    with pytest.raises(ServiceRejected, match="events.0.role: bad") as e:
        client(s.url).post_observations({})
    assert e.value.status == status and len(s.seen) == 1


@pytest.mark.parametrize("status", [401, 403, 500])
def test_auth_and_server_errors_keep_the_payload_for_later(service, status):
    s = service(*[(status, {"message": "no"}, {})] * 3)
    with pytest.raises(ServiceError) as e:
        client(s.url).post_observations({})
    assert not isinstance(e.value, ServiceRejected) and f"HTTP {status}: no" in str(e.value)


def test_an_unreachable_service_gives_up_within_the_deadline():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        t0 = time.monotonic()
        with pytest.raises(ServiceError, match="connection refused"):
            client(url).post_observations({}, deadline=time.monotonic() + 1.0)
        assert time.monotonic() - t0 < 1.5
        with pytest.raises(ServiceError, match="no time left"):
            client(url).post_observations({}, deadline=time.monotonic())


def test_a_service_that_never_answers_is_cut_off_at_the_deadline():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # accepts connections (the kernel does), never reads or answers
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(ServiceError, match="answer within 1.0 s"):
            client(url, attempts=1).post_observations({}, deadline=time.monotonic() + 1.0)
        assert time.monotonic() - t0 < 2.0


def test_the_token_file_must_be_set_and_private(tmp_path):
    with pytest.raises(ConfigError, match="service_token_file"):
        client_from_settings(Settings(service_url="http://x"))
    f = tmp_path / "token"
    f.write_text("s" * 32 + "\n")
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        client_from_settings(Settings(service_url="http://x", service_token_file=str(f)))
    f.chmod(0o600)
    assert client_from_settings(Settings(service_url="http://x", service_token_file=str(f))).token == "s" * 32
