"""The FastAPI application: routes, error handlers and the guard, wired over a Service.

`create_app(service)` is pure wiring; `app_from_environment()` is the factory `attribution serve` gives uvicorn
(each worker process calls it once): it reads the settings the way every command does ($ATTRIBUTION_CONFIG or
the default files, $ATTRIBUTION_DATABASE_URL), the rule pack ($ATTRIBUTION_RULES, the same variable as the
--rules option) and the tokens file.
"""

from __future__ import annotations

import contextlib
import os
import threading

from fastapi import FastAPI

from attribution import __version__
from attribution.api import errors
from attribution.api.bodies import add_body_schemas
from attribution.api.browse_routes import add_browse_routes
from attribution.api.diagnose_routes import add_diagnose_routes
from attribution.api.guard import Guard, Limits
from attribution.api.health_routes import add_health_routes
from attribution.api.metrics import CONTENT_TYPE, RequestMetrics
from attribution.api.read_routes import add_read_routes
from attribution.api.report_routes import BODY_MODELS, add_report_routes
from attribution.api.segments import PathSegments
from attribution.api.service import Service, build_service
from attribution.web.routes import add_web_routes

DESCRIPTION = """\
Receives observations from many clusters' Slurm hooks and answers questions about jobs, nodes and the fleet.

Every /v1 route needs `Authorization: Bearer <token>`, a token from the service's tokens file. Tokens carry
scopes: `report` (POST observations and job contexts) and `read` (everything else). Errors are JSON:
`{"error": code, "message": text, "details": [...]}`.
"""


def create_app(service: Service) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        for warm in getattr(_app.state, "warm", ()):  # slow one-time work of a page, off the request path
            threading.Thread(target=warm, name="warm-up", daemon=True).start()
        try:
            yield
        finally:
            service.dispose()

    app = FastAPI(title="Attribution Service", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    errors.install(app)
    add_health_routes(app, service)
    add_report_routes(app, service)
    add_read_routes(app, service)
    add_browse_routes(app, service)
    add_web_routes(app, service)
    add_diagnose_routes(app, service)
    add_body_schemas(app, BODY_MODELS)
    if service.metrics is not None:
        add_metrics_route(app, service)
    s = service.settings
    app.add_middleware(Guard, tokens=service.tokens, routes=lambda: app.router.routes,
                       limits=Limits(body_bytes=s.max_body_bytes, upload_bytes=s.max_upload_bytes,
                                     body_seconds=s.body_timeout_seconds))
    if service.metrics is not None:  # around the guard: it counts what the guard refuses too
        app.add_middleware(RequestMetrics, metrics=service.metrics, routes=lambda: app.router.routes)
    app.add_middleware(PathSegments)  # outermost: every other part routes on names whole (`%2F` kept inside)
    return app


def add_metrics_route(app: FastAPI, service: Service) -> None:
    from fastapi.responses import Response

    @app.get("/metrics", tags=["probes"], include_in_schema=False)
    async def metrics() -> Response:
        body = await service.db.run(lambda: service.metrics.exposition(service.engine))
        return Response(body, media_type=CONTENT_TYPE)


def app_from_environment() -> FastAPI:
    from attribution.config import load_settings
    from attribution.errors import ConfigError
    from attribution.rulepack.load import load_rules
    from attribution.api.auth import load_tokens

    settings = load_settings()
    if not settings.service.tokens_file:
        raise ConfigError("service.tokens_file is not set: the service never runs without tokens")
    tokens = load_tokens(settings.service.tokens_file)
    rules_dir = os.environ.get("ATTRIBUTION_RULES") or settings.rules_dir
    ruleset = load_rules(rules_dir)
    return create_app(build_service(settings, ruleset, tokens))
