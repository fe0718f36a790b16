"""Events to and from their stored form: fingerprints and rows."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from attribution.model import Event



def fingerprint(cluster: str, ev: Event, scope: str = "") -> bytes:
    """Identity of a fault event: (cluster, node, source, time, kind, normalized message), plus the job and the
    line's location for job-scoped lines (a job's output belongs to that job only)."""
    return fingerprint_of(cluster, ev.node, ev.source, ev.time, ev.kind, ev.message, scope, ev.location)


def fingerprint_of(cluster: str, node: str | None, source: str, time, kind: str, message: str, scope: str = "",
                   location: str = "") -> bytes:
    """`fingerprint` from the parts it reads (what a stored row holds: store.redact recomputes it)."""
    parts = [cluster, node or "", source, time.isoformat() if time else "", kind, message]
    if scope:
        parts += [scope, location]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()[:16]


def event_from_stored(r: Sequence[Any]) -> Event:
    """The Event a row written in store.events.EVENT_COLUMNS order reads back as (what event_from_row makes of
    links.EVENT_ROW): the time only when it is exact, the fields from their JSON."""
    (occurred, _fp, _cluster, node, _key, source, _evidence, kind, role, code, gpu, rank, exact, outcome, action,
     severity, rule, location, message, line, fields) = r
    return event_from_row((kind, role, rule, source, location, line, message, node, gpu, code, rank,
                           occurred if exact else None, outcome, action, severity, json.loads(fields)))


def event_from_row(r: Sequence[Any]) -> Event:
    (kind, role, rule, source, location, line, message, node, gpu, code, rank, time, outcome, action, severity,
     fields) = r
    return Event(kind=kind, role=role, rule=rule, source=source, location=location, line=line, message=message,
                 node=node, gpu=gpu, code=code, rank=rank, time=time, outcome=outcome, action=action,
                 severity=severity, fields=dict(fields or {}))
