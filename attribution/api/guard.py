"""The door of the service, in front of everything else (a pure ASGI middleware).

For every request under /v1/ it checks, before the body is read: a bearer token from the tokens file (401 when
missing or unknown), the scope the matched route needs (403), and the declared body size (413). While the route
reads the body it enforces the same size on what really arrives (chunked bodies included) and a time limit on
receiving it (408). Routes declare their scope and body limit in `openapi_extra` ("x-scope", "x-body"), so the
OpenAPI description says the same thing the guard enforces.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attribution.api.auth import TokenTable
from attribution.api.errors import CODES

PROTECTED_PREFIX = "/v1/"


@dataclass(frozen=True)
class Limits:
    body_bytes: int
    upload_bytes: int
    body_seconds: float


class _BodyTooLarge(HTTPException):
    """Raised from `receive`: an HTTPException, so the framework's body parsing passes it on to the handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {limit} bytes")


class _BodyTimeout(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"request body not received within {seconds:g} s")


class Guard:
    def __init__(self, app: ASGIApp, tokens: TokenTable, limits: Limits, routes) -> None:
        self.app = app
        self.tokens = tokens
        self.limits = limits
        self.routes = routes  # a callable giving the app's routes (they exist only after the app is built)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        policy = self._policy(scope)
        limit = self.limits.upload_bytes if policy.get("x-body") == "upload" else self.limits.body_bytes
        if path.startswith(PROTECTED_PREFIX):
            principal = self.tokens.lookup(_bearer(scope))
            if principal is None:
                await _reject(send, 401, "a valid bearer token is required (Authorization: Bearer <token>)",
                              {"WWW-Authenticate": 'Bearer realm="attribution"'})
                return
            needed = policy.get("x-scope")
            if needed and needed not in principal.scopes:
                await _reject(send, 403, f"this token lacks the '{needed}' scope")
                return
            scope.setdefault("state", {})["principal"] = principal
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _reject(send, 413, f"request body of {declared} bytes is larger than the limit of {limit}")
            return
        started = {"response": False}

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started["response"] = True
            await send(message)

        try:
            await self.app(scope, _limited(receive, limit, self.limits.body_seconds), tracked_send)
        except (_BodyTooLarge, _BodyTimeout) as exc:  # read outside a route (a handler normally answers these)
            if not started["response"]:
                await _reject(send, exc.status_code, exc.detail)

    def _policy(self, scope: Scope) -> dict:
        for route in self.routes():
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return getattr(route, "openapi_extra", None) or {}
        return {}


def _limited(receive: Receive, limit: int, seconds: float) -> Receive:
    """`receive` that raises when the body grows past `limit` or takes longer than `seconds` to arrive."""
    import anyio

    state = {"bytes": 0, "deadline": None}

    async def wrapped() -> Message:
        if state["deadline"] is None:
            state["deadline"] = time.monotonic() + seconds
        remaining = state["deadline"] - time.monotonic()
        if remaining <= 0:
            raise _BodyTimeout(seconds)
        with anyio.move_on_after(remaining) as cs:
            message = await receive()
        if cs.cancelled_caught:
            raise _BodyTimeout(seconds)
        if message["type"] == "http.request":
            state["bytes"] += len(message.get("body", b""))
            if state["bytes"] > limit:
                raise _BodyTooLarge(limit)
            if not message.get("more_body", False):
                state["deadline"] = float("inf")  # body complete: later receives wait for a disconnect only
        return message

    return wrapped


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, token = value.decode("latin-1").strip().partition(" ")
            if kind.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _reject(send: Send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": CODES.get(status, "error"), "message": message, "details": []}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
