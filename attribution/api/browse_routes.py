"""Browsing endpoints (scope `read`): the job list with filters and paging, and one node's history. The dashboard's
pages (attribution/web) show the same data."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated

from fastapi import Depends, FastAPI, Path, Query

from attribution.api.schemas import (ERROR_RESPONSES, ClusterName, ClusterPath, JobRowsOut, Name, NodeHistoryOut,
                                     NodeName, NodePath, When)
from attribution.api.security import policy, require
from attribution.api.service import Service
from attribution.model import OUTCOMES as VERDICT_OUTCOMES
from attribution.store import browse

UTC = timezone.utc
OUTCOMES = ("failed",) + VERDICT_OUTCOMES
Outcome = Annotated[str, Query(pattern="^(" + "|".join(OUTCOMES) + ")$",
                               description="an outcome, or `failed` for every outcome but `none`")]
Cursor = Annotated[str, Query(max_length=200, pattern=r"^[A-Za-z0-9_-]+$",
                              description="the `next` of the previous page")]


def job_filter(cluster: ClusterName | None = None, outcome: str | None = None, node: str | None = None,
               user: Name | None = None, since: datetime | None = None,
               until: datetime | None = None) -> browse.JobFilter:
    return browse.JobFilter(cluster=cluster, outcome=outcome, node=node, user=user,
                            since=since, until=until)


def add_browse_routes(app: FastAPI, svc: Service) -> None:
    reader = [Depends(require("read"))]

    async def on_db(fn, *args, **kwargs):
        def work():
            with svc.engine.connect() as conn:
                return fn(conn, *args, **kwargs)
        return await svc.db.run(work)

    @app.get("/v1/jobs", response_model=JobRowsOut, dependencies=reader, tags=["read"],
             openapi_extra=policy("read"), responses=ERROR_RESPONSES,
             summary="Jobs with their current verdict, newest first, filtered and paged")
    async def get_jobs(cluster: Annotated[ClusterName | None, Query()] = None, outcome: Outcome | None = None,
                       node: Annotated[NodeName | None, Query(description="jobs that ran on this node")] = None,
                       user: Annotated[Name | None, Query()] = None,
                       since: Annotated[When | None, Query(description="job end (or start) from")] = None,
                       until: Annotated[When | None, Query(description="job end (or start) before")] = None,
                       after: Cursor | None = None,
                       limit: Annotated[int, Query(ge=1, le=500)] = 50) -> JobRowsOut:
        where = job_filter(cluster, outcome, node, user, since, until)
        cursor = browse.Cursor.decode(after) if after else None
        rows, nxt = await on_db(browse.list_jobs, where, limit, cursor)
        return JobRowsOut(jobs=rows, next=nxt.encode() if nxt else None)

    @app.get("/v1/nodes/{cluster}/{node}", response_model=NodeHistoryOut, dependencies=reader, tags=["read"],
             openapi_extra=policy("read"), responses=ERROR_RESPONSES,
             summary="A node's history: fault events by week and kind, failed jobs, drains, drain status, "
                     "telemetry counters and counter events")
    async def get_node(cluster: Annotated[ClusterPath, Path()], node: Annotated[NodePath, Path()],
                       days: Annotated[int, Query(ge=1, le=3660, description="how far back")] = 91) -> NodeHistoryOut:
        doc = await on_db(browse.node_history, cluster, node, datetime.now(UTC), days)
        return NodeHistoryOut(**doc)
