"""Probes, open without a token (they carry no data): /healthz (the process answers) and /readyz (the database
answers and has the attribution schema)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from attribution.store import reads
from attribution.api.blocking import Lane
from attribution.api.errors import Busy
from attribution.api.schemas import HealthOut
from attribution.api.service import Service


def add_health_routes(app: FastAPI, svc: Service) -> None:
    lane = Lane("probe", 1, 5.0)  # one probe at a time on the probe engine's single connection
    @app.get("/healthz", response_model=HealthOut, tags=["probes"], summary="The service process answers")
    async def healthz() -> HealthOut:
        return HealthOut(status="ok")

    @app.get("/readyz", response_model=HealthOut, tags=["probes"],
             responses={503: {"model": HealthOut, "description": "the database is not reachable or not migrated"}},
             summary="The database is reachable and migrated")
    async def readyz():
        def probe() -> bool:
            with svc.probe_engine.connect() as conn:
                return reads.schema_ready(conn)

        try:
            ready = await lane.run(probe)
        except Busy:
            return JSONResponse({"status": "database did not answer in time"}, status_code=503)
        except Exception:  # noqa: BLE001 - any failure to reach the database means not ready
            return JSONResponse({"status": "database unreachable"}, status_code=503)
        if not ready:
            return JSONResponse({"status": "database has no attribution schema (run: attribution db upgrade)"},
                                status_code=503)
        return HealthOut(status="ready")
