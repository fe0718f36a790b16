"""One HTTP/1.1 POST from a node hook, on a bare socket: no http.client, email or (for http://) ssl to import.

A hook posts one report and exits; the standard library's HTTP client costs a node ~15 ms of CPU in imports
alone (http.client parses headers with the email package). This is the request the hook needs and nothing
more: one connection, `Connection: close`, the answer read until its Content-Length, its chunked end or the
connection's end. Every socket operation waits at most until the deadline, so a server that accepts and never
answers, or trickles one byte at a time, holds the hook no longer than that. TLS (https://) loads ssl then.
"""

from __future__ import annotations

import socket
import time

MAX_BODY = 16 << 20  # a service's answer to a report is a few hundred bytes


class TransportError(Exception):
    """No usable answer: the server could not be reached, or did not answer completely in time."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Answer:
    __slots__ = ("status", "reason", "headers", "body")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.body = body


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an http(s) URL."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise TransportError(f"not an http(s) URL: {url!r}")
    hostport, _, path = rest.partition("/")
    hostport = hostport.rpartition("@")[2]
    if hostport.startswith("["):  # [IPv6]:port
        host, _, tail = hostport[1:].partition("]")
        port_s = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_s = hostport.partition(":")
    try:
        port = int(port_s) if port_s else (443 if scheme == "https" else 80)
    except ValueError:
        raise TransportError(f"bad port in {url!r}") from None
    return scheme, host, port, "/" + path if path else ""


def post(url: str, path: str, body: bytes, headers: dict[str, str], deadline: float,
         ca_file: str | None = None) -> Answer:
    """POST `body` to `url + path` by `deadline` (time.monotonic()). Raises TransportError."""
    scheme, host, port, base = split_url(url)
    budget = deadline - time.monotonic()
    late = f"no answer within {budget:.1f} s"

    def left() -> float:
        t = deadline - time.monotonic()
        if t <= 0:
            raise TransportError(late)
        return t

    # an ASCII name as bytes: getaddrinfo encodes a str with the idna codec first, which imports encodings.idna,
    # stringprep and unicodedata (~3 ms of a hook) for a name that needs none of them
    name = host.encode("ascii") if host.isascii() else host
    try:
        sock = socket.create_connection((name, port), timeout=left())
    except ConnectionRefusedError:
        raise TransportError("connection refused") from None
    except (TimeoutError, socket.timeout):
        raise TransportError(late) from None
    except OSError as exc:
        raise TransportError(f"cannot connect: {exc}") from None
    try:
        if scheme == "https":
            import ssl

            try:
                sock = ssl.create_default_context(cafile=ca_file).wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as exc:
                raise TransportError(f"TLS: {getattr(exc, 'reason', None) or exc}") from None
        head = [f"POST {base}{path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
                f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        try:
            sock.settimeout(left())
            sock.sendall(request)
            return _answer(sock, left)
        except (TimeoutError, socket.timeout):
            raise TransportError(late) from None
        except OSError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from None
    finally:
        sock.close()


def _answer(sock, left) -> Answer:
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += _recv(sock, left)
        if len(buf) > 65536:
            raise TransportError("answer headers too long")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise TransportError(f"not an HTTP answer: {lines[0][:80]!r}")
    status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Answer(status, reason, headers, _chunked(sock, rest, left))
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        n = int(length)
        if n > MAX_BODY:
            raise TransportError("answer too large")
        while len(rest) < n:
            rest += _recv(sock, left)
        return Answer(status, reason, headers, rest[:n])
    while True:  # until the server closes
        try:
            more = _recv(sock, left)
        except _Closed:
            return Answer(status, reason, headers, rest)
        rest += more
        if len(rest) > MAX_BODY:
            raise TransportError("answer too large")


class _Closed(TransportError):
    pass


def _recv(sock, left) -> bytes:
    sock.settimeout(left())
    data = sock.recv(65536)
    if not data:
        raise _Closed("connection closed before the answer was complete")
    return data


def _chunked(sock, buf: bytes, left) -> bytes:
    out = b""
    while True:
        while b"\r\n" not in buf:
            buf += _recv(sock, left)
        size_line, _, buf = buf.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
        except ValueError:
            raise TransportError("bad chunk size in the answer") from None
        if size == 0:
            return out
        if len(out) + size > MAX_BODY:
            raise TransportError("answer too large")
        while len(buf) < size + 2:
            buf += _recv(sock, left)
        out += buf[:size]
        buf = buf[size + 2:]
