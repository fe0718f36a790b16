"""collect/httpclient.py: a request always ends by its timeout or the caller's deadline, whatever the server does,
credentials only come from owner-only files, and no error says them."""

from __future__ import annotations

import base64
import socket
import threading
import time
import traceback

import pytest

from attribution.collect.httpclient import Endpoint, HttpError, endpoint_from, post_form
from attribution.config import HttpAuthSettings
from attribution.errors import ConfigError

from tests.harness.loki import Blackhole, FakeLoki
from tests.harness.receiver import failing, secret_file


class Trickle:
    """Accepts, then sends one byte of a valid answer every 0.2 s: each read succeeds, the whole never ends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        data = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        for b in data:
            if self.stop.is_set():
                break
            try:
                conn.send(bytes([b]))
            except OSError:
                break
            time.sleep(0.2)
        conn.close()


def test_a_server_trickling_bytes_is_cut_off_at_the_timeout():
    t = Trickle()
    try:
        start = time.monotonic()
        with pytest.raises(HttpError) as exc:
            post_form(Endpoint(t.url, timeout=1.0), "/x", {}, time.monotonic() + 30)
        assert time.monotonic() - start < 2.0
        assert exc.value.transport and "within 1.0 s" in exc.value.reason
    finally:
        t.stop.set()
        t.sock.close()


def test_the_deadline_wins_over_a_longer_timeout():
    with Blackhole() as hole:
        start = time.monotonic()
        with pytest.raises(HttpError, match="within 0.3 s"):
            post_form(Endpoint(hole.url, timeout=30), "/x", {}, time.monotonic() + 0.3)
        assert time.monotonic() - start < 1
    with pytest.raises(HttpError, match="budget exhausted"):
        post_form(Endpoint(hole.url), "/x", {}, time.monotonic() - 1)


def test_error_answers_carry_the_servers_words():
    with FakeLoki(fail_with=(422, '{"status":"error","errorType":"execution","error":"query timed out"}')) as s:
        with pytest.raises(HttpError) as exc:
            post_form(Endpoint(s.url), "/loki/api/v1/query_range", {"query": "{a=\"b\"}"}, time.monotonic() + 5)
    assert exc.value.status == 422 and exc.value.reason == "HTTP 422: execution: query timed out"
    assert not exc.value.transport


def test_urls_and_credentials_are_checked_before_any_request(tmp_path):
    with pytest.raises(ConfigError, match="http"):
        endpoint_from(HttpAuthSettings(url="loki:3100"), "loki")
    secret = tmp_path / "pw"
    secret.write_text("pw")
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        endpoint_from(HttpAuthSettings(url="http://x", username="u", password_file=str(secret)), "loki")
    with pytest.raises(ConfigError, match="needs a username"):
        endpoint_from(HttpAuthSettings(url="http://x", password_file=str(secret)), "loki")
    e = endpoint_from(HttpAuthSettings(url="https://loki.example:3100/base/", tenant="t1", timeout=3), "loki")
    assert e.url == "https://loki.example:3100/base" and e.headers["X-Scope-OrgID"] == "t1" and e.timeout == 3
    assert "Authorization" not in e.headers and e.describe() == "https://loki.example:3100"


@pytest.mark.parametrize("how", ["refused", "500", "timeout"])
@pytest.mark.parametrize("auth", ["token", "basic"])
def test_a_token_or_password_from_a_file_is_in_no_error_nor_the_endpoints_repr(how, auth, tmp_path):
    """Whether the server refuses, answers 500 echoing the request (its Authorization header too), or never
    answers: the reason (stored in a coverage record) and the exception say what happened, never the credential
    nor its base64 in the Basic header."""
    secret = "pw-7c1e0b9a8f6d5e4c3b2a1908f7e6d5c4"
    cred = secret_file(tmp_path, "cred", secret)
    creds = {"token_file": cred} if auth == "token" else {"username": "loki-reader", "password_file": cred}
    with failing(how, ["/q"]) as (url, receiver):
        e = endpoint_from(HttpAuthSettings(url=url, timeout=0.5, **creds), "loki")
        with pytest.raises(HttpError) as exc:
            post_form(e, "/q", {"query": "{a=\"b\"}"}, time.monotonic() + 5)
    said = exc.value.reason + str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value))
    said += repr(e)
    expect = {"refused": "connection refused", "500": "HTTP 500: echo: ", "timeout": "answer within 0.5 s"}
    assert expect[how] in exc.value.reason, exc.value.reason
    b64 = base64.b64encode(f"loki-reader:{secret}".encode()).decode()
    assert secret not in said and secret[3:19] not in said and b64 not in said, said
    if how == "500":
        assert receiver.hits == {"/q": 1} and "[secret]" in exc.value.reason  # it was echoed, and masked
