"""A small fake Loki for tests: `GET|POST /loki/api/v1/query_range` over in-memory streams (stdlib only).

It implements the documented parameters (grafana/loki docs/sources/reference/loki-http-api.md, docs/log-formats.md
6.1) the way the real server treats them:

- `query`: a stream selector with `=`, `!=`, `=~`, `!~` matchers (regexes fully anchored), then line filters
  `|= "x"`, `!= "x"`, `|~ "re"`, `!~ "re"`;
- `start` inclusive, `end` exclusive: nanoseconds, float seconds or RFC 3339; default the last hour;
- `limit` (default 100; above `max_entries_limit` the query is refused with 400, as Loki does), applied to the
  entries of all matching streams together;
- `direction` `forward` (oldest first) or `backward` (newest first, the default);
- the answer `{"status":"success","data":{"resultType":"streams","result":[{"stream":{...},"values":[["<ns>","line"]]}]}}`.

Failure modes for tests: `fail_with = (status, body)`, `delay` seconds before answering. Every request is recorded
(`requests`: params and headers). `Blackhole` is a TCP port that accepts connections and never answers.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeLoki", "Blackhole", "parse_logql", "LogQLError"]

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_FILTER = re.compile(r'\s*(\|=|!=|\|~|!~)\s*"((?:[^"\\]|\\.)*)"')


class LogQLError(ValueError):
    pass


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def parse_logql(query: str):
    """(matchers, filters) of a log query: [(label, op, value)], [(op, value)]."""
    q = query.strip()
    if not q.startswith("{") or "}" not in q:
        raise LogQLError(f"parse error: expected a stream selector: {query!r}")
    depth_end = _selector_end(q)
    inner, rest = q[1:depth_end], q[depth_end + 1:]
    matchers = []
    pos = 0
    while pos < len(inner):
        m = _MATCHER.match(inner, pos)
        if not m:
            raise LogQLError(f"parse error in selector at {inner[pos:pos + 20]!r}")
        matchers.append((m.group(1), m.group(2), _unquote(m.group(3))))
        pos = m.end()
    if not matchers:
        raise LogQLError("queries require at least one matcher")
    filters = []
    pos = 0
    while pos < len(rest.strip()):
        rest = rest.strip()
        m = _FILTER.match(rest, pos)
        if not m:
            raise LogQLError(f"parse error in pipeline at {rest[pos:pos + 20]!r}")
        filters.append((m.group(1), _unquote(m.group(2))))
        pos = m.end()
    return matchers, filters


def _selector_end(q: str) -> int:
    in_str = False
    i = 1
    while i < len(q):
        c = q[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "}":
            return i
        i += 1
    raise LogQLError("parse error: unterminated selector")


def _labels_match(labels: dict, matchers) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have):
            return False
        if op == "!~" and re.fullmatch(value, have):
            return False
    return True


def _line_passes(line: str, filters) -> bool:
    for op, value in filters:
        if op == "|=" and value not in line:
            return False
        if op == "!=" and value in line:
            return False
        if op == "|~" and not re.search(value, line):
            return False
        if op == "!~" and re.search(value, line):
            return False
    return True


def _parse_time(value: str) -> int:
    v = value.strip()
    if re.fullmatch(r"\d+", v):
        return int(v)
    if re.fullmatch(r"\d+\.\d*", v):
        return int(float(v) * 1e9)
    dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


@dataclass
class FakeLoki:
    """The server; `streams` is a list of (labels, [(ns, line), ...]). Use as a context manager."""

    streams: list = field(default_factory=list)
    max_entries_limit: int = 5000
    fail_with: tuple | None = None  # (HTTP status, body) for every query
    delay: float = 0.0
    requests: list = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add_stream(self, labels: dict, entries) -> None:
        self.streams.append((dict(labels), sorted(entries, key=lambda e: e[0])))

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "FakeLoki":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                self._serve(parse_qs(urlsplit(self.path).query))

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode()
                params = parse_qs(urlsplit(self.path).query)
                params.update(parse_qs(body))
                self._serve(params)

            def _serve(self, params):
                if fake.delay:
                    time.sleep(fake.delay)
                if urlsplit(self.path).path != "/loki/api/v1/query_range":
                    return self._send(404, "404 page not found\n", "text/plain")
                flat = {k: v[-1] for k, v in params.items()}
                fake.requests.append({"params": flat, "headers": dict(self.headers.items())})
                if fake.fail_with is not None:
                    status, body = fake.fail_with
                    return self._send(status, body, "text/plain")
                try:
                    status, doc = fake.query_range(flat)
                except LogQLError as exc:
                    return self._send(400, str(exc) + "\n", "text/plain")
                self._send(status, json.dumps(doc) if isinstance(doc, dict) else doc,
                           "application/json" if isinstance(doc, dict) else "text/plain")

            def _send(self, status, body, ctype):
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def query_range(self, p: dict):
        matchers, filters = parse_logql(p.get("query", ""))
        now = time.time_ns()
        start = _parse_time(p["start"]) if p.get("start") else now - 3600 * 1_000_000_000
        end = _parse_time(p["end"]) if p.get("end") else now
        limit = int(p.get("limit") or 100)
        if limit > self.max_entries_limit:
            return 400, (f"max entries limit per query exceeded, limit > max_entries_limit "
                         f"({limit} > {self.max_entries_limit})\n")
        direction = p.get("direction") or "backward"
        if direction not in ("forward", "backward"):
            return 400, f"invalid direction {direction!r}\n"
        picked = []
        for si, (labels, entries) in enumerate(self.streams):
            if not _labels_match(labels, matchers):
                continue
            for ei, (ts, line) in enumerate(entries):
                if start <= ts < end and _line_passes(line, filters):
                    picked.append((ts, si, ei, line))
        picked.sort(reverse=(direction == "backward"))
        picked = picked[:limit]
        by_stream: dict[int, list] = {}
        for ts, si, _, line in picked:
            by_stream.setdefault(si, []).append([str(ts), line])
        result = [{"stream": self.streams[si][0], "values": vals} for si, vals in by_stream.items()]
        return 200, {"status": "success", "data": {"resultType": "streams", "result": result,
                                                   "stats": {"summary": {"totalEntriesReturned": len(picked)}}}}


class Blackhole:
    """A TCP port that accepts connections and never answers (a hung server)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._address = self._sock.getsockname()[:2]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        """Still valid after the context ends: then nothing listens there any more (a server that is down)."""
        host, port = self._address
        return f"http://{host}:{port}"

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            self._held.append(conn)

    def __enter__(self) -> "Blackhole":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for c in self._held:
            c.close()
        self._sock.close()


def utc_ns(dt: datetime) -> int:
    dt = dt.astimezone(timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000
