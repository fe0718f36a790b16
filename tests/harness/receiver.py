"""A local HTTP server (http.server in a thread, on loopback) that keeps every JSON body posted to it, by path.

Paths in `failing` answer 500 with the whole request echoed back in one line of JSON, `{"errorType": "echo",
"error": ...}` (the credential headers first, then the request line, the other headers and the body): a careless
server or proxy that repeats what it got, so that a client whose error message quotes the first few hundred
characters of the answer would quote the credentials. `stop()` closes the port (connection refused), `start()` opens the same
port again (the sink is back). `hits` counts every request per path, failed ones too.
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable, Iterator

from tests.harness.loki import Blackhole


class Receiver:
    def __init__(self) -> None:
        self.posts: dict[str, list] = {}
        self.hits: dict[str, int] = {}
        self.headers: dict[str, list[dict]] = {}
        self.failing: set[str] = set()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.hits[self.path] = receiver.hits.get(self.path, 0) + 1
                if self.path in receiver.failing:
                    first = ("authorization", "x-slurm-user-token")
                    heads = sorted(self.headers.items(), key=lambda kv: kv[0].lower() not in first)
                    said = "; ".join(f"{k}: {v}" for k, v in heads)
                    echo = json.dumps({"errorType": "echo", "error": f"{said}; {self.command} {self.path}; "
                                                                     f"{raw.decode(errors='replace')}"}).encode()
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(echo)))
                    self.end_headers()
                    self.wfile.write(echo)
                    return
                receiver.posts.setdefault(self.path, []).append(json.loads(raw) if raw else None)
                receiver.headers.setdefault(self.path, []).append(dict(self.headers))
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = _serve  # noqa: N815 - http.server's names
            do_GET = _serve  # noqa: N815

            def log_message(self, *args):
                pass

        return Handler

    def start(self) -> None:
        """Listen (again, on the same port once it had one)."""
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Close the port: a client is refused until start()."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    close = stop


@contextlib.contextmanager
def failing(how: str, paths: Iterable[str] = ()) -> Iterator[tuple[str, Receiver]]:
    """(base URL, receiver) of a server that fails in one way: `refused` (nothing listens on its port), `500`
    (the receiver, answering 500 with the request echoed on `paths`), `timeout` (accepts, never answers)."""
    receiver = Receiver()
    receiver.failing.update(paths)
    try:
        if how == "timeout":
            with Blackhole() as hole:
                yield hole.url, receiver
            return
        if how == "refused":
            receiver.stop()
        elif how != "500":
            raise ValueError(how)
        yield receiver.url, receiver
    finally:
        receiver.close()


def secret_file(folder: Path, name: str, value: str) -> str:
    """An owner-only file holding `value` (what a *_file setting names)."""
    p = folder / name
    p.write_text(value + "\n")
    p.chmod(0o600)
    return str(p)
