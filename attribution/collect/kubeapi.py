"""The Kubernetes API through the official client (`kubernetes`, the `kubernetes` extra): list with `limit` and
`continue`, watch from a resourceVersion with bookmarks, get one object, read a container's log. Objects come back
as the API's JSON (plain dicts), the form the Kueue adapter parses.

This is the one seam where the client's exceptions (ApiException, urllib3's connection and protocol errors) become
ours: `Gone` for `410` (an expired resourceVersion or continue token: relist), `KubeApiError` for anything else,
with the HTTP status when there was one (kubernetes.io docs/reference/using-api/api-concepts.md, docs/kubernetes.md).

Connection: `connectors.kubernetes.api_server` (with `token_file`, `ca_file`), else the in-cluster service account
when this runs in a pod, else the kubeconfig (`kubeconfig`, `context`, or the client's default file).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

from attribution.config import KubernetesSettings
from attribution.errors import ConfigError, SourceError

#: How long past a watch's timeoutSeconds the client waits for the server to end it before calling it dropped.
WATCH_SLACK_SECONDS = 15


class KubeApiError(SourceError):
    """The API server could not be reached or refused a request; `status` is the HTTP status when it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class Gone(KubeApiError):
    """410: the resourceVersion (or continue token) is older than the server's history: list again."""


@dataclass(frozen=True)
class Resource:
    """A collection: API group ('' for the core group), version, plural; namespaced or cluster-scoped."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def name(self) -> str:
        """`plural.group/version` (`workloads.kueue.x-k8s.io/v1beta2`, `pods/v1`): the key of its bookmark."""
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        out = f"{base}/{self.plural}"
        if name:
            out += f"/{name}" + (f"/{sub}" if sub else "")
        return out


PODS = Resource("", "v1", "pods")
EVENTS = Resource("", "v1", "events")
NODES = Resource("", "v1", "nodes", namespaced=False)


def workloads(version: str) -> Resource:
    return Resource("kueue.x-k8s.io", version, "workloads")


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict

    @property
    def resource_version(self) -> str | None:
        return (self.object.get("metadata") or {}).get("resourceVersion")


class KubeApi:
    """One API server connection (a pool, shared by threads)."""

    def __init__(self, settings: KubernetesSettings) -> None:
        from kubernetes import client

        self.settings = settings
        self._client = client.ApiClient(_configuration(settings))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "KubeApi":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------------------------
    def _request(self, path: str, query: dict[str, Any], timeout: float | tuple):
        """GET path?query through the client (its host, credentials, TLS and pool); the urllib3 response, not yet
        read (a watch or a log streams), or KubeApiError / Gone."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        params = [(k, "true" if v is True else str(v)) for k, v in query.items() if v is not None and v is not False]
        try:
            method, url, headers, body, post = self._client.param_serialize(
                "GET", path, query_params=params, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"])
            raw = self._client.call_api(method, url, headers, body, post, _request_timeout=timeout).response
        except ApiException as exc:
            raise _api_error(path, exc.status or None, exc.body or exc.reason) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(f"{path}: {type(exc).__name__}: {exc}") from None
        if not 200 <= raw.status < 300:
            try:
                body = raw.read()
            finally:
                raw.release_conn()
            raise _api_error(path, raw.status, body.decode("utf-8", "replace"))
        return raw

    def _json(self, path: str, query: dict[str, Any]) -> dict:
        import urllib3

        resp = self._request(path, query, self.settings.timeout)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(f"{path}: {type(exc).__name__}: {exc}") from None
        finally:
            resp.release_conn()
        try:
            doc = json.loads(data)
        except ValueError:
            raise KubeApiError(f"{path}: the API server did not answer JSON") from None
        if not isinstance(doc, dict):
            raise KubeApiError(f"{path}: the API server answered {type(doc).__name__}, not an object")
        return doc

    def get(self, res: Resource, namespace: str | None, name: str) -> dict:
        return self._json(res.path(namespace, name), {})

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             one_page: bool = False) -> tuple[list[dict], str | None]:
        """Every object, page by page (`limit`, `continue`: one consistent snapshot); (items, the list's
        resourceVersion, from which a watch misses nothing). Gone when a continue token expired. `one_page`: the
        first page only (is the collection served at all?)."""
        items: list[dict] = []
        cont = None
        rv = None
        while True:
            doc = self._json(res.path(namespace), {"limit": limit, "continue": cont, "labelSelector": label_selector,
                                                   "fieldSelector": field_selector})
            got = doc.get("items") or []
            if not isinstance(got, list):
                raise KubeApiError(f"{res.path(namespace)}: 'items' is not a list")
            items += [o for o in got if isinstance(o, dict)]
            meta = doc.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            cont = meta.get("continue")
            if not cont or one_page:
                return items, rv

    def watch(self, res: Resource, resource_version: str, timeout_seconds: int,
              namespace: str | None = None, label_selector: str | None = None) -> Iterator[WatchEvent]:
        """One watch request from `resource_version` with bookmarks, until the server ends it (timeoutSeconds).
        Gone on an expired resourceVersion (an ERROR event of code 410, or HTTP 410); KubeApiError when the
        connection drops or the server answers an error: the caller watches again from the last version it saw."""
        import urllib3

        path = res.path(namespace)
        resp = self._request(path, {"watch": True, "resourceVersion": resource_version,
                                    "allowWatchBookmarks": True, "timeoutSeconds": timeout_seconds,
                                    "labelSelector": label_selector},
                             (self.settings.timeout, timeout_seconds + WATCH_SLACK_SECONDS))
        try:
            buf = b""
            for chunk in resp.stream(64 * 1024, decode_content=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(path, line)
            if buf.strip():
                yield _event(path, buf)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(f"{path}: watch connection dropped ({type(exc).__name__})") from None
        finally:
            resp.release_conn()

    def log(self, namespace: str, pod: str, container: str, previous: bool, deadline: float) -> "LogStream":
        """A container's log with RFC 3339 time stamps (`timestamps=true`), as a binary stream read as it comes;
        `previous`: the instance before its last restart. Reading stops at `deadline` (time.monotonic())."""
        path = PODS.path(namespace, pod, "log")
        left = max(0.1, deadline - time.monotonic())
        resp = self._request(path, {"container": container, "timestamps": True, "previous": previous},
                             (min(self.settings.timeout, left), min(self.settings.timeout, left)))
        return LogStream(path, resp, deadline)


class LogStream:
    """The body of a log request as a file (`read(n)`), cut at a deadline (`cut` then says so)."""

    def __init__(self, path: str, resp, deadline: float) -> None:
        self.path, self._resp, self._deadline = path, resp, deadline
        self.cut: str | None = None

    def read(self, n: int = -1) -> bytes:
        import urllib3

        if self.cut is not None:
            return b""
        if time.monotonic() >= self._deadline:
            self.cut = "the time for this workload ran out while reading"
            return b""
        try:
            return self._resp.read(n if n and n > 0 else 64 * 1024)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.cut = f"the stream was cut ({type(exc).__name__})"
            return b""

    def close(self) -> None:
        self._resp.release_conn()


def _event(path: str, line: bytes) -> WatchEvent:
    try:
        doc = json.loads(line)
    except ValueError:
        raise KubeApiError(f"{path}: a watch line that is not JSON") from None
    typ, obj = (doc.get("type"), doc.get("object")) if isinstance(doc, dict) else (None, None)
    if not isinstance(obj, dict) or typ not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        raise KubeApiError(f"{path}: a watch line that is no watch event")
    if typ == "ERROR":
        raise _api_error(path, obj.get("code"), json.dumps(obj))
    return WatchEvent(typ, obj)


def _api_error(path: str, status: int | None, body: str | None) -> KubeApiError:
    message = ""
    try:
        doc = json.loads(body or "")
        message = doc.get("message") or doc.get("reason") or ""
    except (ValueError, AttributeError):
        message = (body or "").strip().splitlines()[0][:200] if (body or "").strip() else ""
    text = f"{path}: HTTP {status}" + (f": {message}" if message else "")
    return (Gone if status == 410 else KubeApiError)(text, status)


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _configuration(settings: KubernetesSettings):
    from kubernetes import client, config

    conf = client.Configuration()
    if settings.api_server:
        conf.host = settings.api_server.rstrip("/")
        if settings.token_file:
            from attribution.secrets import read_secret

            conf.api_key = {"authorization": read_secret(settings.token_file)}
            conf.api_key_prefix = {"authorization": "Bearer"}
        if settings.ca_file:
            conf.ssl_ca_cert = settings.ca_file
        return conf
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(f"{SERVICE_ACCOUNT}/token"):
            config.load_incluster_config(client_configuration=conf)
        else:
            config.load_kube_config(config_file=settings.kubeconfig, context=settings.context,
                                    client_configuration=conf)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise ConfigError(f"connectors.kubernetes: no way to reach the Kubernetes API ({exc}); set api_server, "
                          f"kubeconfig or run in a pod with a service account") from None
    return conf


__all__ = ["KubeApi", "KubeApiError", "Gone", "LogStream", "Resource", "WatchEvent", "PODS", "EVENTS", "NODES", "workloads"]
