"""The hooks' side of the Attribution Service: post one observation batch (the epilog payload), within a deadline.

The report token comes from `service_token_file`, a file only its owner may read (secrets.read_secret). Every call
is bounded by the caller's deadline and by `service.client_timeout_seconds`; a busy service (503, 429) or a lost
connection is retried while time remains. Failures raise ServiceError, and ServiceRejected when the service
refused the payload itself (malformed, too large): sending it again cannot help.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from attribution.frozen import Value
from attribution.errors import AttributionError, ConfigError
from attribution.node.httppost import Answer, TransportError, post
from attribution.secrets import read_secret

if TYPE_CHECKING:
    from attribution.config import Settings

OBSERVATIONS = "/v1/observations"
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
#: Statuses that say the payload itself is wrong: keeping it for a later retry would block the spool forever.
PERMANENT_STATUSES = frozenset({400, 413, 415, 422})


class ServiceError(AttributionError):
    """The service could not be reached, or did not accept the payload now."""


class ServiceRejected(ServiceError):
    """The service refused the payload for good."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class ServiceClient(Value, frozen=False):
    """A node's client of `attribution serve`: its address, token and retry bounds."""

    base_url: str
    token: str
    timeout: float = 10.0
    attempts: int = 3

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass  # one connection per request (a hook posts once or twice): nothing stays open

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "User-Agent": "attribution-hook",
                "Accept": "application/json", "Content-Type": "application/json"}

    def post_observations(self, payload: dict, deadline: float | None = None) -> dict:
        """Post one batch; returns the service's answer (what was stored, whether the verdict changed)."""
        last = "no attempt"
        body = json.dumps(payload, separators=(",", ":")).encode()
        for attempt in range(self.attempts):
            left = self.timeout if deadline is None else min(self.timeout, deadline - time.monotonic())
            if left <= 0.05:
                raise ServiceError(f"no time left to report to {self.base_url} ({last})")
            try:
                r = post(self.base_url.rstrip("/"), OBSERVATIONS, body, self._headers(), time.monotonic() + left)
            except TransportError as exc:
                last = exc.reason
                retry_after = 0.2
            else:
                if r.status < 300:
                    return _json(r)
                message = _message(r)
                if r.status in PERMANENT_STATUSES:
                    raise ServiceRejected(r.status, message)
                if r.status not in RETRY_STATUSES:
                    raise ServiceError(f"HTTP {r.status}: {message}")
                last = f"HTTP {r.status}: {message}"
                retry_after = _retry_after(r)
            import random  # only when a retry waits

            pause = min(retry_after, 2.0) * (0.5 + random.random())
            if attempt + 1 < self.attempts and (deadline is None or time.monotonic() + pause < deadline):
                time.sleep(pause)
            else:
                break
        raise ServiceError(f"{self.base_url}: {last}")


def client_from_settings(settings: Settings) -> ServiceClient:
    """A client for settings.service_url with the report token from settings.service_token_file."""
    if not settings.service_url:
        raise ConfigError("service_url is not set")
    if not settings.service_token_file:
        raise ConfigError("service_url is set but service_token_file is not (the report token's file)")
    return ServiceClient(settings.service_url, read_secret(settings.service_token_file),
                         timeout=settings.service.client_timeout_seconds)


def _json(r: Answer) -> dict:
    try:
        body = json.loads(r.body)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _message(r: Answer) -> str:
    body = _json(r)
    msg = body.get("message") if isinstance(body.get("message"), str) else r.body[:200].decode("utf-8", "replace")
    return msg.strip().splitlines()[0] if msg and msg.strip() else r.reason


def _retry_after(r: Answer) -> float:
    try:
        return max(0.0, float(r.headers.get("retry-after", "0.5")))
    except ValueError:
        return 0.5
