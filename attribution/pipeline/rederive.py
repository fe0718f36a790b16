"""Re-derive a stored job's verdict with another rule pack, from the evidence kept for replay.

The kept lines are written back at their line numbers into a scratch bundle (blank lines in between), so the
collectors parse them exactly as they parsed the original files, and the locations (and so the fingerprints) of
the events are the same (a file read outside a bundle is written at its bundle place, and the events found in it
are put back at the place it was read: replay/keep.py). What the live connectors read (Loki streams, pod logs, files, job
output, PromQL series) is replayed through the connectors' own parsers with its kept times and labels, and the
metric rules run on the kept series (replay/streams.py). The counter rules run on the kept snapshots, so a node's
telemetry events are the new pack's. Events the kept evidence cannot give again (any event whose file is not
among the kept files or streams, a telemetry or metric event of a node without kept snapshots or series) are
taken as stored.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml

from attribution.model import Coverage, Event, ExecutionContext, Verdict
from attribution.rulepack.load import RuleSet
from attribution.serialize import context_to_json

#: Never pad a scratch file past this line number (a kept line further down is dropped).
MAX_LINENO = 20_000_000


@dataclass(frozen=True)
class Rederived:
    events: tuple[Event, ...]
    verdict: Verdict


def write_scratch_bundle(root: Path, ctx: ExecutionContext, doc: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "context.yaml").write_text(yaml.safe_dump(context_to_json(ctx), sort_keys=False), encoding="utf-8")
    for f in doc.get("files", ()):
        rel = Path(f["file"])
        if rel.is_absolute() or ".." in rel.parts:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            at = 1
            for lineno, line, _flags in f["lines"]:
                if lineno < at or lineno > MAX_LINENO:
                    continue
                out.write("\n" * (lineno - at))
                out.write(line.replace("\n", " ") + "\n")
                at = lineno + 1


def kept_files(doc: dict) -> set[str]:
    return {f["file"] for f in doc.get("files", ())}


def kept_origins(doc: dict) -> dict[str, str]:
    """{bundle place: where it was read} of the kept files read outside a bundle (a node's journald, a job's
    output on the controller)."""
    return {f["file"]: f["origin"] for f in doc.get("files", ()) if f.get("origin")}


def _at_origin(e: Event, origins: dict[str, str]) -> Event:
    """The event re-derived from a scratch file, at the location the reporter read it at (so its fingerprint,
    for a job's output, and its link are the stored event's)."""
    from attribution.frozen import replace

    head, sep, tail = e.location.rpartition(":")
    if sep and tail.isdigit() and head in origins:
        return replace(e, location=f"{origins[head]}:{tail}")
    return e


def _file_of(location: str) -> str:
    head, sep, tail = location.rpartition(":")
    return head if sep and tail.isdigit() else location


def rederive(ruleset: RuleSet, ctx: ExecutionContext, doc: dict, coverage: Iterable[Coverage],
             stored_events: Iterable[Event] = ()) -> Rederived:
    """The events and verdict `ruleset` gives on the kept evidence, with the job's stored coverage."""
    from attribution.correlate.rootcause import correlate
    from attribution.extract.counters import TELEMETRY_SOURCE
    from attribution.extract.events import extract
    from attribution.pipeline.diagnose import diagnose_bundle, telemetry_events
    from attribution.replay.keep import kept_telemetry
    from attribution.replay.streams import metric_events, metric_nodes, replay_streams, stream_locations

    with tempfile.TemporaryDirectory(prefix="attribution-replay-") as tmp:
        root = Path(tmp) / "bundle"
        write_scratch_bundle(root, ctx, doc)
        d = diagnose_bundle(ruleset, root)
    snaps = kept_telemetry(doc)
    origins = kept_origins(doc)
    files = kept_files(doc) | stream_locations(doc)
    metrics = metric_nodes(doc)
    read_at = {(f.get("node"), f["origin"]) for f in doc.get("files", ()) if f.get("origin")}
    events = [_at_origin(e, origins) for e in d.events] + telemetry_events(ruleset, ctx, snaps)
    events += extract(ruleset, ctx, replay_streams(doc, ctx, ruleset.prefilter))  # what the connectors read
    events += metric_events(ruleset, ctx, doc)
    seen = {(e.rule, e.location, e.line) for e in events}
    for e in stored_events:
        # not given by the kept files or connector streams (another collector), nor by the kept snapshots or
        # metric series, nor the scheduler's own (derived from ctx)
        given = e.source == "scheduler" or (e.source == TELEMETRY_SOURCE and e.node in snaps) or (
            e.source == "metrics" and e.node in metrics) or (
            (None if e.source == "job" else e.node, _file_of(e.location)) in read_at)
        if not given and _file_of(e.location) not in files and (e.rule, e.location, e.line) not in seen:
            events.append(e)
    events.sort(key=Event.sort_key)
    return Rederived(tuple(events), correlate(ruleset, ctx, events, list(coverage)))
