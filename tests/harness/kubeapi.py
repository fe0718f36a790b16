"""A fake Kubernetes API server for tests: a real HTTP server on 127.0.0.1 speaking the documented list/watch
semantics (kubernetes.io docs/reference/using-api/api-concepts.md: "Efficient detection of changes", "Watch
bookmarks", "Retrieving large results sets in chunks") to whatever client the code under test uses (stdlib only).

- Collections: `/api/v1/{pods,events,nodes}`, `/api/v1/namespaces/NS/{pods,events}`, `/apis/GROUP/VERSION/PLURAL`
  and `/apis/GROUP/VERSION/namespaces/NS/PLURAL` (the Kueue Workloads on the versions in `served`, each object
  shown with that version's apiVersion), a single object by name, `labelSelector` (`k=v`, `k`, comma-joined) and
  `fieldSelector` (`involvedObject.name=`, `involvedObject.kind=`).
- Every change gets the next resourceVersion (a number, as etcd's revision) and is kept in a history.
- List: `limit` and `continue` paginate a consistent snapshot: every page shows the objects as they were at the
  first page's resourceVersion (the list's `metadata.resourceVersion`); a continue token whose snapshot was
  compacted away is `410 Gone` (reason Expired).
- Watch (`watch=true`): the changes after `resourceVersion` as ADDED/MODIFIED/DELETED lines, then, with
  `allowWatchBookmarks=true`, a BOOKMARK carrying the current resourceVersion, then the server ends the response
  (as at `timeoutSeconds`). A resourceVersion older than the compacted history is an ERROR event with a Status of
  code 410 (reason Expired, "too old resource version"), as kube-apiserver sends it, or with `gone_as_http` an HTTP
  410 answer.
- The test drives time: `timeline` is a list of steps; each watch request first applies the next step (a callable
  that changes objects), so the watcher sees the changes as they happen after its list. A step may be the string
  "drop": that watch request sends half of its events and then cuts the connection without ending the chunked
  body. `caught_up` is set once a watch request found the timeline empty and nothing to send.
- Pod logs: `/api/v1/namespaces/NS/pods/NAME/log?container=C&timestamps=true&previous=true`, from `logs`
  keyed (namespace, pod, container, previous); 400 for a previous instance that does not exist, 404 for a pod
  that does not.

Every request is recorded in `requests` (path and query).
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeKubeApi"]

CORE = ("", "v1")


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _labels_match(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and labels.get(key.strip()) != value.strip():
            return False
        if not sep and key.strip() not in labels:
            return False
    return True


def _fields_match(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        path, _, value = term.partition("=")
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if str(cur) != value:
            return False
    return True


@dataclass
class FakeKubeApi:
    """Use as a context manager; `url` is the API server's address."""

    #: the versions served per API group (the Kueue Workloads: v1beta1 and v1beta2)
    served: dict = field(default_factory=lambda: {"kueue.x-k8s.io": ("v1beta1", "v1beta2")})
    gone_as_http: bool = False
    timeline: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)
    caught_up: bool = False
    #: called before a watch request applies its step (a test's way to let the watcher's workers finish first)
    before_step: Callable | None = None
    watch_requests: int = 0
    rv: int = 1000
    compacted: int = 0
    #: (rv, collection, type, object), collection = (group, plural)
    history: list = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _server: ThreadingHTTPServer | None = None

    # -- the test's side: changing the cluster ----------------------------------------------------------------
    def put(self, group: str, plural: str, obj: dict) -> dict:
        """Create or update an object (ADDED or MODIFIED); returns it with its new resourceVersion."""
        with self._lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace"), meta["name"])
            existed = self._current(group, plural).get(key) is not None
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            meta.setdefault("uid", f"uid-{plural}-{meta.get('namespace')}-{meta['name']}")
            self.history.append((self.rv, (group, plural), "MODIFIED" if existed else "ADDED", obj))
            return copy.deepcopy(obj)

    def delete(self, group: str, plural: str, namespace: str | None, name: str) -> None:
        with self._lock:
            obj = self._current(group, plural).get((namespace, name))
            if obj is None:
                return
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.history.append((self.rv, (group, plural), "DELETED", obj))

    def get(self, group: str, plural: str, namespace: str | None, name: str) -> dict | None:
        obj = self._current(group, plural).get((namespace, name))
        return copy.deepcopy(obj) if obj else None

    def compact(self) -> None:
        """Forget the history up to now (etcd compaction): older resourceVersions are 410 Gone."""
        with self._lock:
            self.compacted = self.rv

    def _state_at(self, group: str, plural: str, rv: int) -> dict:
        state: dict = {}
        for at, coll, typ, obj in self.history:
            if at > rv:
                break
            if coll != (group, plural):
                continue
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if typ == "DELETED":
                state.pop(key, None)
            else:
                state[key] = obj
        return state

    def _current(self, group: str, plural: str) -> dict:
        return self._state_at(group, plural, self.rv)

    # -- the server --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "FakeKubeApi":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                with fake._lock:
                    fake.requests.append({"path": parts.path, "query": q})
                try:
                    fake._route(self, parts.path, q)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- answering ---------------------------------------------------------------------------------------------
    @staticmethod
    def _send(h, status: int, doc: Any, ctype: str = "application/json") -> None:
        data = (json.dumps(doc) if not isinstance(doc, (str, bytes)) else doc)
        data = data.encode() if isinstance(data, str) else data
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(self, h, path: str, q: dict) -> None:
        seg = [s for s in path.split("/") if s]
        if seg[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", seg[2:]
        elif seg and seg[0] == "apis" and len(seg) >= 3:
            group, version, rest = seg[1], seg[2], seg[3:]
            if group in self.served and version not in self.served[group]:
                return self._send(h, 404, _status(404, "NotFound", "the server could not find the requested "
                                                                    "resource"))
        else:
            return self._send(h, 404, _status(404, "NotFound", "the server could not find the requested resource"))
        namespace = None
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return self._send(h, 404, _status(404, "NotFound", "no resource named"))
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        if name is None:
            if q.get("watch") in ("true", "1"):
                return self._watch(h, group, version, plural, namespace, q)
            return self._list(h, group, version, plural, namespace, q)
        obj = self._current(group, plural).get((namespace, name))
        if obj is None:
            return self._send(h, 404, _status(404, "NotFound", f'{plural} "{name}" not found'))
        if sub == "log":
            return self._log(h, namespace, name, q)
        return self._send(h, 200, self._shown(obj, group, version))

    def _shown(self, obj: dict, group: str, version: str) -> dict:
        obj = copy.deepcopy(obj)
        if group:
            obj["apiVersion"] = f"{group}/{version}"
        return obj

    def _selected(self, state: dict, namespace, q: dict) -> list:
        out = []
        for (ns, name), obj in sorted(state.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
            if namespace is not None and ns != namespace:
                continue
            if _labels_match(obj, q.get("labelSelector")) and _fields_match(obj, q.get("fieldSelector")):
                out.append(obj)
        return out

    def _list(self, h, group, version, plural, namespace, q: dict) -> None:
        with self._lock:
            offset, snapshot = 0, self.rv
            if q.get("continue"):
                snap, _, off = q["continue"].partition(":")
                snapshot, offset = int(snap), int(off)
                if snapshot < self.compacted:
                    return self._send(h, 410, _status(410, "Expired", "The provided continue parameter is too old "
                                                                      "to display a consistent list result."))
            items = self._selected(self._state_at(group, plural, snapshot), namespace, q)
        limit = int(q["limit"]) if q.get("limit") else None
        page = items[offset:offset + limit] if limit else items[offset:]
        more = limit is not None and offset + limit < len(items)
        meta = {"resourceVersion": str(snapshot)}
        if more:
            meta["continue"] = f"{snapshot}:{offset + limit}"
        kind = (page[0].get("kind") if page else plural.capitalize().rstrip("s")) or "Object"
        self._send(h, 200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}" if group else "v1",
                            "metadata": meta, "items": [self._shown(o, group, version) for o in page]})

    def _watch(self, h, group, version, plural, namespace, q: dict) -> None:
        if self.timeline and self.before_step is not None:
            self.before_step()
        with self._lock:
            self.watch_requests += 1
            step = self.timeline.pop(0) if self.timeline else None
            drop = step == "drop"
            if callable(step):
                step(self)
            since = int(q.get("resourceVersion") or 0)
            if since < self.compacted:
                if self.gone_as_http:
                    return self._send(h, 410, _status(410, "Gone", f"too old resource version: {since} "
                                                                   f"({self.compacted})"))
                lines = [{"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} "
                                                                             f"({self.compacted})")}]
            else:
                lines = []
                for at, coll, typ, obj in self.history:
                    if at <= since or coll != (group, plural):
                        continue
                    if namespace is not None and obj["metadata"].get("namespace") != namespace:
                        continue
                    if not (_labels_match(obj, q.get("labelSelector")) and
                            _fields_match(obj, q.get("fieldSelector"))):
                        continue
                    lines.append({"type": typ, "object": self._shown(obj, group, version)})
                if not lines and not self.timeline and not drop:
                    self.caught_up = True
                if q.get("allowWatchBookmarks") in ("true", "1") and not drop:
                    kind = "Workload" if plural == "workloads" else plural.capitalize().rstrip("s")
                    lines.append({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": f"{group}/{version}" if group else "v1",
                        "metadata": {"resourceVersion": str(self.rv),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}})
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        if drop:
            lines = lines[:max(1, len(lines) // 2)] if lines else []
        for ev in lines:
            data = (json.dumps(ev) + "\n").encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()
        if drop:  # a dropped connection: no terminating chunk
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(b"0\r\n\r\n")
        h.close_connection = True

    def _log(self, h, namespace: str, pod: str, q: dict) -> None:
        container = q.get("container")
        previous = q.get("previous") in ("true", "1")
        text = self.logs.get((namespace, pod, container, previous))
        if text is None:
            if previous:
                return self._send(h, 400, _status(400, "BadRequest", f'previous terminated container "{container}" '
                                                                     f'in pod "{pod}" not found'))
            return self._send(h, 404, _status(404, "NotFound", f'pods "{pod}" not found'))
        if q.get("timestamps") not in ("true", "1"):  # the recorded lines carry their time stamps
            text = "\n".join(ln.split(" ", 1)[1] if " " in ln else ln for ln in text.splitlines()) + "\n"
        self._send(h, 200, text, "text/plain")

