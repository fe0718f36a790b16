"""Where errors become HTTP statuses: domain exceptions and request problems to one JSON error shape.

    {"error": "invalid_input", "message": "one line for a human", "details": ["...", ...]}

Bad input is always a 4xx with a message; a database that is away or refuses is a 503 (the reporter keeps its
spool and retries); anything else is a 500 without internals.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attribution.errors import ConfigError, InputError, RulePackError, StoreError

log = logging.getLogger("attribution.api")

#: Short codes for the statuses the service returns.
CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         406: "not_acceptable", 408: "request_timeout", 411: "length_required", 413: "too_large",
         415: "unsupported_media_type", 422: "invalid_input", 429: "too_many_requests", 500: "internal_error",
         503: "unavailable", 504: "timeout"}


class Busy(Exception):
    """No database connection (or diagnose slot) became free in time."""


def error_response(status: int, message: str, details: list[str] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": CODES.get(status, "error"), "message": message, "details": details or []}
    return JSONResponse(body, status_code=status, headers=headers)


def _where(loc) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "body"


def describe_validation(errors) -> list[str]:
    out = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        kind = e.get("type", "")
        if kind == "json_invalid":  # FastAPI's decoder gives the character, pydantic's the line and column
            reason = (e.get("ctx") or {}).get("error", "JSON decode error")
            where = f" at character {loc[1]}" if len(loc) > 1 else ""
            out.append(f"body: not valid JSON ({reason}{where})")
        elif loc == ("body",) and isinstance(e.get("input"), (bytes, str)):
            out.append("body: expected a JSON object sent as Content-Type: application/json")
        else:
            msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
            out.append(f"{_where(loc)}: {msg}")
    return out


def install(app: FastAPI) -> None:
    """Register the handlers on the app."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = describe_validation(exc.errors())
        first = details[0] if details else "invalid request"
        more = f" (and {len(details) - 1} more problem(s))" if len(details) > 1 else ""
        return error_response(422, f"{first}{more}", details[:50])

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(InputError)
    async def _input(request: Request, exc: InputError):
        return error_response(422, str(exc))

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return error_response(503, str(exc) or "busy, try again", headers={"Retry-After": "1"})

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError):
        log.warning("database: %s", exc)
        return error_response(503, "the database is unavailable or refused the work; try again later",
                              headers={"Retry-After": "5"})

    @app.exception_handler(ConfigError)
    @app.exception_handler(RulePackError)
    async def _config(request: Request, exc: Exception):
        log.error("configuration: %s", exc)
        return error_response(500, "the service is misconfigured; see its log")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, SQLAlchemyError):
            log.warning("database: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return error_response(503, "the database is unavailable or refused the work; try again later",
                                  headers={"Retry-After": "5"})
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error; see the service log")
