"""node.httppost: the hook's one POST on a bare socket, against servers writing the answer every way HTTP/1.1
allows (Content-Length, chunked, until close) and servers that misbehave."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from attribution.node.httppost import TransportError, post, split_url


def _server(answer: bytes):
    """A server that reads one request (until its body is complete) and writes `answer` raw, then closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = {}

    def run():
        conn, _ = srv.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        head, _, body = data.partition(b"\r\n\r\n")
        n = int([ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(body) < n:
            body += conn.recv(4096)
        got["head"], got["body"] = head.decode(), body
        conn.sendall(answer)
        conn.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", got


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\nX-A: 1\r\n\r\n{\"stored\": 1}\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sto\r\n9;x=y\r\nred\": 1}\n\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\n{\"stored\": 1}\n",
])
def test_the_answer_is_read_however_it_is_framed(answer):
    url, got = _server(answer)
    r = post(url + "/base", "/v1/x", b'{"a": 1}', {"Authorization": "Bearer t"}, time.monotonic() + 5)
    assert (r.status, r.reason, r.body) == (200, "OK", b'{"stored": 1}\n')
    assert got["body"] == b'{"a": 1}'
    assert got["head"].startswith("POST /base/v1/x HTTP/1.1\r\n") and "Authorization: Bearer t" in got["head"]


def test_an_answer_cut_short_is_a_transport_error():
    url, _ = _server(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    with pytest.raises(TransportError, match="closed"):
        post(url, "/", b"", {}, time.monotonic() + 5)


def test_garbage_is_not_an_answer():
    url, _ = _server(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(TransportError, match="not an HTTP answer"):
        post(url, "/", b"", {}, time.monotonic() + 5)


def test_urls():
    assert split_url("http://svc:8080/api") == ("http", "svc", 8080, "/api")
    assert split_url("https://u@svc") == ("https", "svc", 443, "")
    assert split_url("http://[::1]:9/") == ("http", "::1", 9, "")  # the client appends its own path
    with pytest.raises(TransportError):
        split_url("ftp://x")
