"""POST /v1/diagnose (scope `read`): an incident bundle uploaded as tar.gz, unpacked safely into a private
temporary directory, diagnosed like `attribution diagnose`, and forgotten. Nothing is stored."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path as FsPath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from attribution.api.diagnose_worker import Budget, budgeted
from attribution.scope.archive import ArchiveLimits, unpack
from attribution.errors import InputError
from attribution.api.schemas import ERROR_RESPONSES
from attribution.api.security import policy, require
from attribution.api.service import Service

ARCHIVE_TYPES = ("application/gzip", "application/x-gzip", "application/x-tar+gzip", "application/x-gtar",
                 "application/octet-stream")

DIAGNOSE_EXTRA = {
    **policy("read", body="upload"),
    "requestBody": {
        "required": True,
        "description": "the incident bundle (docs/bundle.md) as a gzip-compressed tar archive: context.yaml, "
                       "nodes/<node>/*.log and job/* at its top or in its single top-level folder",
        "content": {t: {"schema": {"type": "string", "format": "binary"}}
                    for t in ("application/gzip", "application/octet-stream")},
    },
}
DIAGNOSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    200: {"description": "the verdict document (docs/verdict.md)",
          "content": {"application/json": {"schema": {"type": "object", "additionalProperties": True}}}},
    415: {"description": "the body is not sent as a gzip archive"},
}


def add_diagnose_routes(app: FastAPI, svc: Service) -> None:
    limits = ArchiveLimits(max_files=svc.settings.max_bundle_files, max_bytes=svc.settings.max_bundle_bytes)
    budget = Budget(cpu_seconds=svc.settings.diagnose_cpu_seconds, memory_bytes=svc.settings.diagnose_memory_bytes,
                    wall_seconds=svc.settings.diagnose_wall_seconds)

    def diagnose(upload, max_symptoms: int | None) -> dict:
        tmp = FsPath(tempfile.mkdtemp(prefix="attribution-upload-"))
        try:
            upload.seek(0)
            root = unpack(upload, tmp / "bundle", limits)
            try:  # as `attribution diagnose --json`, in a child process within the per-request budget
                return budgeted(FsPath(svc.ruleset.root), root, max_symptoms, budget)
            except InputError as exc:
                raise InputError(_relative(exc.path, root), exc.message, exc.line) from None
        except InputError as exc:
            raise InputError(_scrub(exc.path, tmp), _scrub(exc.message, tmp), exc.line) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @app.post("/v1/diagnose", dependencies=[Depends(require("read"))], tags=["diagnose"],
              openapi_extra=DIAGNOSE_EXTRA, responses=DIAGNOSE_RESPONSES, response_class=JSONResponse,
              summary="Diagnose an uploaded incident bundle (tar.gz) without storing anything")
    async def post_diagnose(request: Request, max_symptoms: Annotated[int | None, Query(
            ge=0, le=1_000_000, description="list at most this many symptoms (all by default)")] = None):
        ctype = (request.headers.get("content-type") or "application/octet-stream").split(";")[0].strip().lower()
        if ctype not in ARCHIVE_TYPES:
            raise HTTPException(415, f"send the bundle as application/gzip (a tar.gz archive), not {ctype[:80]}")
        upload = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
        try:
            async for chunk in request.stream():  # the guard stops it at max_upload_bytes
                upload.write(chunk)
            if upload.tell() == 0:
                raise InputError("bundle.tar.gz", "empty body: send the bundle as a tar.gz archive")
            return JSONResponse(await svc.cpu.run(diagnose, upload, max_symptoms))
        finally:
            upload.close()


def _relative(path: str, root: FsPath) -> str:
    try:
        return str(FsPath(path).relative_to(root)) or "."
    except ValueError:
        return path


def _scrub(text: str, tmp: FsPath) -> str:
    """Messages name files inside the bundle, never the server's temporary directory."""
    return text.replace(str(tmp / "bundle") + "/", "").replace(str(tmp / "bundle"), "bundle").replace(str(tmp), "")
