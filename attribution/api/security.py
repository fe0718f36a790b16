"""Route-side view of authentication: the OpenAPI security scheme, and a dependency that re-checks the scope the
guard already enforced (so a route is never open because of a middleware mistake)."""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from attribution.api.auth import Principal

bearer_scheme = HTTPBearer(auto_error=False, description="A token from the service's tokens file.")


def require(scope: str):
    """A dependency: the request's principal, which must hold `scope`."""

    def dependency(request: Request,
                   _creds: HTTPAuthorizationCredentials | None = Depends(bearer_scheme)) -> Principal:
        principal = getattr(request.state, "principal", None)
        if principal is None:
            raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        if scope not in principal.scopes:
            raise HTTPException(403, f"this token lacks the '{scope}' scope")
        return principal

    return dependency


def policy(scope: str, body: str = "json") -> dict:
    """A route's `openapi_extra`: what the guard enforces before the route runs."""
    return {"x-scope": scope, "x-body": body}
