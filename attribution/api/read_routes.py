"""The reading endpoints (scope `read`): a job's current verdict, a node's events, the fleet views."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query
from fastapi.responses import JSONResponse

from attribution.store import reads
from attribution.timeparse import format_utc, parse_iso
from attribution.api.schemas import (ERROR_RESPONSES, ClusterName, ClusterPath, JobIdPath, Name, NodeEventsOut,
                                     NodeName, NodePath, RowsOut, Time)
from attribution.api.security import policy, require
from attribution.api.service import Service

UTC = timezone.utc
DEFAULT_SINCE = timedelta(days=7)
Limit = Annotated[int, Query(ge=1, le=10000, description="at most this many rows")]

VERDICT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    200: {"description": "the verdict document (docs/verdict.md, schema attribution.verdict/1)",
          "content": {"application/json": {"schema": {"type": "object", "additionalProperties": True}}}},
    404: {"description": "no verdict for this job (yet)"},
}


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_iso(value)  # Time already checked the form and the range


def add_read_routes(app: FastAPI, svc: Service) -> None:
    reader = [Depends(require("read"))]

    async def on_db(fn, *args):
        def work():
            with svc.engine.connect() as conn:
                return fn(conn, *args)
        return await svc.db.run(work)

    @app.get("/v1/jobs/{cluster}/{job_id}/verdict", dependencies=reader, tags=["read"],
             openapi_extra=policy("read"), responses=VERDICT_RESPONSES, response_class=JSONResponse,
             summary="The job's current verdict (the JSON of docs/verdict.md)")
    async def get_verdict(cluster: Annotated[ClusterPath, Path()], job_id: Annotated[JobIdPath, Path()],
                          start: Annotated[Time | None, Query(
                              description="the job's start time, to pick one of several jobs with this id "
                                          "(Slurm ids wrap); default: the newest")] = None) -> JSONResponse:
        got = await on_db(reads.verdict_state, cluster, job_id, _time(start))
        if got is None:
            raise HTTPException(404, f"no verdict for job {job_id} on cluster {cluster}")
        # true while reports stored since await their attribution (the settle interval): read again to have it
        return JSONResponse(got[0], headers={"Attribution-Pending": "true" if got[1] else "false"})

    @app.get("/v1/nodes/{cluster}/{node}/events", response_model=NodeEventsOut, dependencies=reader,
             tags=["read"], openapi_extra=policy("read"), responses=ERROR_RESPONSES,
             summary="A node's distinct fault events in a time range, oldest first")
    async def get_node_events(cluster: Annotated[ClusterPath, Path()], node: Annotated[NodePath, Path()],
                              since: Annotated[Time | None, Query(description="from (inclusive); default: "
                                                                              "7 days ago")] = None,
                              until: Annotated[Time | None, Query(description="to (exclusive)")] = None,
                              limit: Limit = 1000) -> NodeEventsOut:
        lo = _time(since) or datetime.now(UTC) - DEFAULT_SINCE
        hi = _time(until)
        events, truncated = await on_db(reads.node_events, cluster, node, lo, hi, limit)
        return NodeEventsOut(cluster=cluster, node=node, since=format_utc(lo), until=format_utc(hi),
                             events=events, truncated=truncated)

    @app.get("/v1/recurring-faults", response_model=RowsOut, dependencies=reader, tags=["read"],
             openapi_extra=policy("read"), responses=ERROR_RESPONSES,
             summary="Faults seen on the same node/GPU in two or more ISO weeks (view recurring_faults)")
    async def get_recurring_faults(cluster: Annotated[ClusterName | None, Query()] = None,
                                   node: Annotated[NodeName | None, Query()] = None,
                                   kind: Annotated[Name | None, Query()] = None,
                                   limit: Limit = 100) -> RowsOut:
        rows, truncated = await on_db(reads.view_rows, "recurring_faults",
                                      {"cluster": cluster, "node": node, "kind": kind},
                                      "weeks DESC, events DESC, cluster, node, kind", limit)
        return RowsOut(rows=rows, truncated=truncated)

    @app.get("/v1/drain-candidates", response_model=RowsOut, dependencies=reader, tags=["read"],
             openapi_extra=policy("read"), responses=ERROR_RESPONSES,
             summary="Nodes the drain policy would drain now (view drain_candidates)")
    async def get_drain_candidates(cluster: Annotated[ClusterName | None, Query()] = None,
                                   limit: Limit = 1000) -> RowsOut:
        rows, truncated = await on_db(reads.view_rows, "drain_candidates", {"cluster": cluster},
                                      "score DESC NULLS LAST, cluster, node", limit)
        return RowsOut(rows=rows, truncated=truncated)
