"""HTTP requests to log and metric servers (Loki, Prometheus) that always end within a deadline.

A server that is down answers at once (connection refused); one that is slow, or accepts the connection and never
answers, is cut off when the request's own timeout or the caller's deadline passes, whichever comes first: every
socket operation has a timeout and a watchdog shuts the socket down at the deadline, so even a server that
trickles one byte at a time cannot hold a request longer. Every failure becomes an `HttpError` with a reason a
coverage record can carry; `transport` tells a server that could not be reached from one that answered badly.
A token or password read from a file is a credential: not in the endpoint's repr, and every reason passes through
the endpoint's Masker (a coverage record is stored; an answer that echoes the request is quoted masked).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping
from urllib.parse import urlencode, urlsplit

from attribution.errors import ConfigError, SourceError
from attribution.secrets import Masker, read_secret

if TYPE_CHECKING:
    from attribution.config import HttpAuthSettings

MAX_BODY = 512 << 20  # an answer larger than this is refused (bounded memory)
CHUNK = 1 << 16


class HttpError(SourceError):
    """A request that gave no usable answer. `transport`: the server could not be reached or did not answer."""

    def __init__(self, reason: str, transport: bool = False, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transport = transport
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where a server is and how to talk to it; built once from the settings (credentials read here)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    timeout: float = 10.0
    ca_file: str | None = None
    masker: Masker = field(default_factory=Masker, repr=False)  # the credentials in `headers`

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))

    def describe(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}"


def endpoint_from(settings: HttpAuthSettings, name: str) -> Endpoint:
    """An Endpoint for configured settings. Raises ConfigError for a bad URL or an unusable credentials file."""
    url = (settings.url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"connectors.{name}.url: expected http(s)://host[:port][/path], got {url!r}")
    headers = {"Accept": "application/json", "User-Agent": "attribution"}
    if settings.tenant:
        headers["X-Scope-OrgID"] = settings.tenant
    masker = Masker()
    if settings.token_file:
        token = read_secret(settings.token_file)
        headers["Authorization"] = f"Bearer {token}"
        masker = Masker.of(token)
    elif settings.username:
        password = read_secret(settings.password_file) if settings.password_file else ""
        raw = f"{settings.username}:{password}"
        headers["Authorization"] = "Basic " + base64.b64encode(raw.encode()).decode("ascii")
        masker = Masker.of(password, raw)  # raw's forms hold its base64, the header's value
    elif settings.password_file:
        raise ConfigError(f"connectors.{name}: password_file needs a username")
    return Endpoint(url=url.rstrip("/"), headers=headers, timeout=float(settings.timeout), ca_file=settings.ca_file,
                    masker=masker)


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]  # names in lower case
    body: bytes


def post_form(endpoint: Endpoint, path: str, params: Mapping[str, str], deadline: float) -> bytes:
    """POST `params` form-encoded to `endpoint.url + path` and return the body of a 200 answer.

    Ends by `deadline` (a time.monotonic() value) or after `endpoint.timeout`, whichever is first."""
    resp = post(endpoint, path, urlencode(params).encode("ascii"), "application/x-www-form-urlencoded", deadline)
    if resp.status != 200:
        raise HttpError(endpoint.masker.mask(f"HTTP {resp.status}: {_error_text(resp.body)}"), status=resp.status)
    return resp.body


def post(endpoint: Endpoint, path: str, body: bytes, content_type: str, deadline: float) -> Response:
    """POST `body` to `endpoint.url + path`; the answer whatever its status. Raises HttpError (transport=True)
    when the server could not be reached or gave no complete answer by `deadline` or `endpoint.timeout`."""
    try:
        return _post(endpoint, path, body, content_type, deadline)
    except HttpError as exc:
        raise HttpError(endpoint.masker.mask(exc.reason), exc.transport, exc.status) from None


def _post(endpoint: Endpoint, path: str, body: bytes, content_type: str, deadline: float) -> Response:
    now = time.monotonic()
    budget = min(endpoint.timeout, deadline - now)
    if budget <= 0:
        raise HttpError("time budget exhausted before the request", transport=True)
    stop = now + budget
    parts = urlsplit(endpoint.url)
    host = parts.hostname or ""
    try:
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=endpoint.ca_file)
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, parts.port, timeout=budget,
                                                                          context=context)
        else:
            conn = http.client.HTTPConnection(host, parts.port, timeout=budget)
    except (OSError, ssl.SSLError) as exc:
        raise HttpError(f"cannot set up a connection: {exc}", transport=True) from None
    headers = dict(endpoint.headers)
    headers["Content-Type"] = content_type
    watchdog = threading.Timer(budget, _cut, args=(conn,))
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            conn.request("POST", (parts.path or "") + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = _read_body(conn, resp, stop)
        except (TimeoutError, socket.timeout):
            raise HttpError(f"no answer within {budget:.1f} s", transport=True) from None
        except ConnectionRefusedError:
            raise HttpError("connection refused", transport=True) from None
        except ssl.SSLError as exc:
            raise HttpError(f"TLS: {exc.reason or exc}", transport=True) from None
        except (http.client.HTTPException, OSError) as exc:
            if time.monotonic() >= stop - 0.01:
                raise HttpError(f"no complete answer within {budget:.1f} s", transport=True) from None
            raise HttpError(f"{type(exc).__name__}: {exc}", transport=True) from None
    finally:
        watchdog.cancel()
        conn.close()
    return Response(resp.status, resp.reason or "", MappingProxyType({k.lower(): v for k, v in resp.getheaders()}),
                    data)


def _cut(conn: http.client.HTTPConnection) -> None:
    """The watchdog: shutting the socket down wakes a thread blocked in recv() on it."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read_body(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, stop: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        left = stop - time.monotonic()
        if left <= 0:
            raise TimeoutError()
        if conn.sock is not None:
            conn.sock.settimeout(left)
        chunk = resp.read(CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            raise HttpError(f"answer larger than {MAX_BODY >> 20} MiB")
        chunks.append(chunk)


def _error_text(data: bytes) -> str:
    """The server's own words: Prometheus' JSON `error`, or Loki's plain-text body, first line."""
    text = data.decode("utf-8", errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("error"):
        text = f"{doc.get('errorType', 'error')}: {doc['error']}"
    first = text.splitlines()[0] if text else "(empty body)"
    return first[:300]


__all__ = ["Endpoint", "HttpError", "Response", "endpoint_from", "post", "post_form"]
