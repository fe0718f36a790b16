"""Posting an observation document to `attribution serve`: http.client and ssl, nothing written by hand.

An https:// service's certificate is verified against the system's CA store, or the CA bundle the node names
(ATTRIBUTION_SERVICE_CA_FILE), with its host name checked (ssl.create_default_context): there is no switch to turn
that off. The report token is read from a file only its owner may read. Each request is bounded by the time left:
the socket's timeout is the time left before the connect and before the answer is read, and an answer larger
than MAX_ANSWER is not read. A busy service (408, 429, 502-504) is asked again after a pause while time remains;
a refusal of the document itself (400, 403, 413, 415, 422) is final: the spool sets the document aside.

Standard library only, as everything in attribution/node.
"""

from __future__ import annotations

import json
import os
import stat
import time

__all__ = ["OBSERVATIONS", "Refused", "Unreachable", "Client", "read_token"]

OBSERVATIONS = "/v1/observations"
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
#: Statuses that say the document itself will never be taken: keeping it would block the spool for ever.
FINAL_STATUSES = frozenset({400, 403, 413, 415, 422})
MAX_ANSWER = 1 << 20


class Unreachable(Exception):
    """The service could not be reached, or did not take the document now: keep it for later."""


class Refused(Exception):
    """The service refused the document for good (its status and message)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


def read_token(path: str) -> str:
    """The report token from a file only its owner may read. Raises Unreachable naming what is wrong (the
    document is kept: the file may be fixed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreachable(f"{path}: cannot read the token file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreachable(f"{path}: the token file is not a regular file")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise Unreachable(f"{path}: the token file is readable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}")
        token = os.read(fd, 4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not token:
        raise Unreachable(f"{path}: the token file is empty")
    return token


class Client:
    """A node's client of the service: its address, token, CA bundle and per-request timeout."""

    __slots__ = ("scheme", "host", "port", "base", "token", "ca_file", "timeout", "attempts")

    def __init__(self, url: str, token: str, ca_file: str | None = None, timeout: float = 10.0,
                 attempts: int = 3) -> None:
        from urllib.parse import urlsplit

        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise Unreachable(f"{url!r}: not an http:// or https:// URL")
        self.scheme, self.host = u.scheme, u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base = u.path.rstrip("/")
        self.token, self.ca_file, self.timeout, self.attempts = token, ca_file, timeout, attempts

    def _connection(self, timeout: float):
        import http.client

        if self.scheme == "https":
            import ssl

            ctx = ssl.create_default_context(cafile=self.ca_file)  # verifies the chain and the host name
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ctx)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        if self.host.isascii():
            # the socket module encodes a str host with the idna codec (~4 ms of imports: encodings.idna,
            # stringprep, unicodedata); an ASCII name needs none, so the address goes to it as bytes
            import socket

            conn._create_connection = lambda address, *args: socket.create_connection(  # type: ignore[attr-defined]
                (address[0].encode("ascii"), address[1]), *args)
        return conn

    def post(self, document: dict, deadline: float) -> dict:
        """Post one document; the service's answer. Raises Refused (for good) or Unreachable (try later)."""
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Accept": "application/json", "User-Agent": "attribution-node"}
        last = "no attempt"
        for attempt in range(self.attempts):
            left = min(self.timeout, deadline - time.monotonic())
            if left <= 0.05:
                raise Unreachable(f"no time left to report to {self.host}:{self.port} ({last})")
            pause = 0.2
            conn = self._connection(left)
            try:
                conn.request("POST", self.base + OBSERVATIONS, body=body, headers=headers)
                if conn.sock is not None:
                    conn.sock.settimeout(max(0.05, deadline - time.monotonic()))
                r = conn.getresponse()
                answer = r.read(MAX_ANSWER)
                status = r.status
                retry_after = r.getheader("Retry-After")
            except (OSError, ValueError) as exc:  # refused, reset, timed out, TLS (ssl.SSLError is an OSError)
                last = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # http.client.HTTPException: a broken answer
                last = f"{type(exc).__name__}: {exc}"
            else:
                if status < 300:
                    return _json(answer)
                message = _message(answer, status)
                if status in FINAL_STATUSES:
                    raise Refused(status, message)
                if status not in RETRY_STATUSES:
                    raise Unreachable(f"HTTP {status}: {message}")
                last = f"HTTP {status}: {message}"
                try:
                    pause = max(0.0, float(retry_after or 0.5))
                except ValueError:
                    pause = 0.5
            finally:
                conn.close()
            import random  # only when a retry waits

            pause = min(pause, 2.0) * (0.5 + random.random())
            if attempt + 1 >= self.attempts or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        raise Unreachable(f"{self.host}:{self.port}: {last}")


def _json(body: bytes) -> dict:
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _message(body: bytes, status: int) -> str:
    doc = _json(body)
    msg = doc.get("message") if isinstance(doc.get("message"), str) else body[:200].decode("utf-8", "replace")
    msg = msg.strip().splitlines()[0] if msg and msg.strip() else ""
    return msg or f"status {status}"
