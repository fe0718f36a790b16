"""Names in URL paths: a percent-encoded slash (`%2F`) stays inside its path segment.

Pages and clients put a name into a path as one percent-encoded segment (`/ui/nodes/c1/rack%2F7`,
`/v1/jobs/c1/team%2Ftrain-3/verdict`: a Kueue workload's id is `namespace/name`). The ASGI server decodes the
path before routing, so `%2F` would become a separator and the route would not match. `PathSegments`, the
outermost middleware, routes on the raw path instead: each segment decoded on its own, a slash inside a segment
held as NUL (a character no name has: attribution/names.py), and the routes' name parameters (`from_segment`,
the path types of api/schemas.py) give it back as `/`. A path with an encoded NUL names nothing: 404.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from attribution.api.errors import CODES

#: What a slash inside one path segment is held as between the middleware and the route.
SLASH = "\x00"


def from_segment(value: str) -> str:
    """A name parameter of a route as the name it is (a slash that was `%2F` in the URL is a slash again)."""
    return value.replace(SLASH, "/") if isinstance(value, str) else value


def routed_path(raw_path: bytes) -> str | None:
    """The path to route on when `raw_path` holds an encoded slash inside a segment (None when the server's own
    decoding is right); raises ValueError for an encoded NUL."""
    lowered = raw_path.lower()
    if b"%00" in lowered:
        raise ValueError("an encoded NUL in the path")
    if b"%2f" not in lowered:
        return None
    segments = [unquote(part.decode("latin-1")) for part in raw_path.split(b"/")]
    return "/".join(s.replace("/", SLASH) for s in segments)


class PathSegments:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("raw_path"):
            try:
                path = routed_path(scope["raw_path"])
            except ValueError as exc:
                await _not_found(send, str(exc))
                return
            if path is not None:
                scope = dict(scope, path=path)
        await self.app(scope, receive, send)


async def _not_found(send: Send, message: str) -> None:
    body = json.dumps({"error": CODES[404], "message": message, "details": []}).encode()
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
