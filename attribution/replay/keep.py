"""The evidence kept for replay: the lines any rule's prefilter flagged and the error-looking lines
(rules/replay/error-lines.txt), bounded, with their source, node, file and line number; plus the counter snapshots
(telemetry, docs/bundle.md) of every node, parsed (what the counter rules read, in the report payload's form:
collect.telemetry.snapshot_to_json). See docs/replay.md.

One `LineKeeper` selects the lines wherever they are read: from a bundle's files (`keep_bundle`), from the
blocks a node's observation document carries (pipeline/intake.py: the node sent its filter's hits and its
error-looking lines), from the controller's reading of the job's output, and centrally as the live connectors
read a job's Loki streams, pod logs, files and job output (`stream_tap`: kept under `streams` with the time and
labels that replay them, replay/streams.py; a backfilled job's piece). A reporter's piece is stored apart,
bounded by what the job's other pieces left (`bound_piece`); `merge_piece` joins the pieces into the job's
document when it is read (a reporter's later piece replacing its earlier one).

Every kept line is redacted first (extract.redact, rules/redactions.yaml: its passwords, tokens and keys become
`[redacted:KIND]`), wherever it was read. The document is plain JSON (compressed by the store). Replaying it
(attribution.pipeline.rederive) writes the kept lines back at their line numbers, so the collectors read them
exactly as they read the original files, and runs the counter rules on the kept snapshots. A file read elsewhere
than in a bundle (a node's journald, a job's output on the controller) is written back at its bundle place
(`file`), with where it was read (`origin`): the events re-derived from it carry the original locations again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from attribution.extract.redact import redact
from attribution.model import ExecutionContext
from attribution.replay.bounds import Limits, bound_metrics, bound_telemetry
from attribution.rulepack.prefilter import Prefilter
from attribution.serialize import line_cost

if TYPE_CHECKING:
    from attribution.rulepack.values import RuleSet

FORMAT = 1
READ_CHUNK = 8 << 20
#: Characters past a kept line's cut that are redacted with it (a secret across the cut is seen whole: a PEM
#: private key on one line is under 4 KiB).
REDACT_MARGIN = 4096
#: Flags of a kept line: flagged by a rule's prefilter, error-looking.
PREFILTER, ERRORLIKE = "p", "e"


def pack_errorlike(ruleset: RuleSet) -> Prefilter:
    """The pack's error-looking filter: built with the pack (so the node agent's cache holds it compiled), else
    (a pack cached before it had one) built now."""
    own = getattr(ruleset, "errorlike", None)
    return own if own is not None else errorlike_filter(ruleset.root)


def errorlike_filter(rules_dir: Path | str | None = None) -> Prefilter:
    from attribution.rulepack.errorlines import error_line_patterns, informational_line_patterns

    return Prefilter(error_line_patterns(rules_dir), informational_line_patterns(rules_dir))


def bundle_files(bundle: Path, ctx: ExecutionContext) -> list[tuple[str, str | None, str, Path]]:
    """(source, node, location, path) of every log the bundle collector reads, in its order."""
    from attribution.collect.bundle import FABRICMANAGER_LOG, KERNEL_LOG, _other_logs

    out = []
    for node in ctx.nodes:
        ndir = bundle / "nodes" / node
        if not ndir.is_dir():
            continue
        for source, name in (("kernel", KERNEL_LOG), ("fabricmanager", FABRICMANAGER_LOG)):
            if (ndir / name).is_file():
                out.append((source, node, f"nodes/{node}/{name}", ndir / name))
        for extra in _other_logs(ndir):
            out.append(("node", node, f"nodes/{node}/{extra.name}", extra))
    job_dir = bundle / "job"
    if job_dir.is_dir():
        for p in sorted(q for q in job_dir.iterdir() if q.is_file()):
            out.append(("job", None, f"job/{p.name}", p))
    return out


def flagged_lines(data: bytes, prefilter: Prefilter, errorlike: Prefilter) -> list[tuple[int, int, int, str]]:
    """(line number from 1, start, end, flags) of every line of `data` either filter selects."""
    marks: dict[int, str] = {}
    for flag, filt in ((PREFILTER, prefilter), (ERRORLIKE, errorlike)):
        for pos in filt.find(data):
            start = data.rfind(b"\n", 0, pos) + 1
            marks[start] = marks.get(start, "") + flag
    out = []
    lineno = 1
    last = 0
    for start in sorted(marks):
        lineno += data.count(b"\n", last, start)
        last = start
        end = data.find(b"\n", start)
        out.append((lineno, start, len(data) if end < 0 else end, marks[start]))
    return out


def _read_chunks(path: Path):
    """The file in chunks cut at line ends (a line longer than a chunk is cut)."""
    with open(path, "rb") as fp:
        rest = b""
        while True:
            block = fp.read(READ_CHUNK)
            if not block:
                if rest:
                    yield rest
                return
            block = rest + block
            nl = block.rfind(b"\n")
            if nl < 0:
                rest = block
                continue
            yield block[:nl + 1]
            rest = block[nl + 1:]


class LineKeeper:
    """The kept lines of one reporter (a bundle, a node), fed file by file or piece by piece as a reader streams
    them, bounded as they come: the prefilter hits first (they make the verdict), then the error-looking lines,
    each in the order fed; once a line does not fit, none of its kind after it is kept (so the result is the same
    as keeping every candidate and cutting the sorted list)."""

    def __init__(self, ruleset: RuleSet, limits: Limits = Limits(), errorlike: Prefilter | None = None) -> None:
        self.ruleset, self.limits = ruleset, limits
        self.errorlike = errorlike if errorlike is not None else pack_errorlike(ruleset)
        self.candidates = 0
        self._kept: tuple[list, list] = ([], [])  # (source, node, file, origin, lineno, text, flags, ns)
        self._size = [0, 0]
        self._full = [False, False]
        self._streams: dict[str, dict] = {}  # location -> what replays a connector's stream (see streams.py)

    def feed(self, source: str, node: str | None, file: str, data: bytes, base: int = 0,
             origin: str | None = None, stamps: list[int] | None = None) -> None:
        """The flagged lines of `data` (`base`: the lines of the file before it), kept as `file`'s; `stamps`: the
        time (ns) each line of `data` was stored with (a Loki stream's), kept with the line."""
        for lineno, start, end, flags in flagged_lines(data, self.ruleset.prefilter(source), self.errorlike):
            self.candidates += 1
            k = 0 if PREFILTER in flags else 1
            if self._full[k]:
                continue
            # never kept with its secrets (extract.redact): redacted before it is cut to its bound, with a margin
            # past the cut so that a secret across it is seen whole
            raw = data[start:min(end, start + 4 * (self.limits.line_chars + REDACT_MARGIN))]
            text = raw.decode("utf-8", errors="replace").rstrip("\r")[:self.limits.line_chars + REDACT_MARGIN]
            text = redact(self.ruleset.redactions, text)[:self.limits.line_chars]
            n = line_cost(text)
            if len(self._kept[k]) >= self.limits.lines or self._size[k] + n > self.limits.bytes:
                self._full[k] = True
                continue
            ns = stamps[lineno - 1] if stamps is not None and lineno <= len(stamps) else None
            self._kept[k].append((source, node, file, origin, base + lineno, text, flags, ns))
            self._size[k] += n

    def stream_tap(self, reader: str, source: str, node: str | None, location: str,
                   labels: Mapping[str, str] | None = None) -> Callable[..., None]:
        """A tap for what a connector reads (`reader`: `text` for a file or a command's output parsed at
        `location`, `loki` for a Loki stream): called with (data, base) as textio.Tapped does, or (data, 0,
        stamps) with the time of each line; kept under `streams` with what replays it (replay/streams.py)."""
        meta = {"reader": reader, "source": source, "node": node, "location": location}
        if labels is not None:
            meta["labels"] = dict(sorted(labels.items()))
        self._streams[location] = meta
        return lambda data, base, stamps=None: self.feed(source, node, location, data, base, stamps=stamps)

    def tap(self, source: str, node: str | None, file: str, origin: str | None = None) -> Callable[[bytes, int], None]:
        """A tap for collect.textio.Tapped: what a reader passes on is fed as `file`'s, read at `origin`."""
        return lambda data, base: self.feed(source, node, file, data, base, origin)

    def feed_file(self, source: str, node: str | None, file: str, path: Path) -> None:
        base = 0
        try:
            for block in _read_chunks(path):
                self.feed(source, node, file, block, base)
                base += block.count(b"\n")
        except OSError:
            pass  # unreadable: the collector already records it in the coverage

    def document(self, reporter: str | None = None) -> dict:
        """The kept lines as a document (without telemetry: keep_telemetry adds it)."""
        kept = list(self._kept[0])
        size = self._size[0]
        truncated = self._full[0] or self._full[1]
        for cand in self._kept[1]:
            n = line_cost(cand[5])
            if len(kept) >= self.limits.lines or size + n > self.limits.bytes:
                truncated = True
                break
            kept.append(cand)
            size += n
        doc = {"format": FORMAT, "rules_version": self.ruleset.version, "truncated": truncated,
               "candidates": self.candidates, "files": _files([c for c in kept if c[2] not in self._streams])}
        streams = _streams([c for c in kept if c[2] in self._streams], self._streams)
        return doc | ({"streams": streams} if streams else {}) | ({"reporter": reporter} if reporter else {})


def _files(kept) -> list[dict]:
    files: dict[tuple, dict] = {}
    for source, node, file, origin, lineno, text, flags, _ns in sorted(kept, key=lambda c: (c[2], c[4])):
        f = files.get((source, node, file))
        if f is None:
            f = files[(source, node, file)] = {"source": source, "node": node, "file": file}
            if origin:
                f["origin"] = origin
            f["lines"] = []
        f["lines"].append([lineno, text, flags])
    return list(files.values())


def _streams(kept, metas: Mapping[str, dict]) -> list[dict]:
    """Connector streams (docs/replay.md): each line [number, text, flags] and, from Loki, its time in ns."""
    out: dict[str, dict] = {}
    for _source, _node, location, _origin, lineno, text, flags, ns in sorted(kept, key=lambda c: (c[2], c[4])):
        s = out.get(location)
        if s is None:
            s = out[location] = dict(metas[location], lines=[])
        s["lines"].append([lineno, text, flags] + ([] if ns is None else [ns]))
    return list(out.values())


def keep_bundle(bundle: Path, ctx: ExecutionContext, ruleset: RuleSet, limits: Limits = Limits(),
                telemetry: Mapping | None = None) -> dict:
    """The evidence document of one bundle (see the module docstring); `telemetry` is its {node: (prolog,
    epilog)} snapshots as collected (collect.telemetry.collect_bundle_telemetry)."""
    keeper = LineKeeper(ruleset, limits)
    for source, node, location, path in bundle_files(Path(bundle), ctx):
        keeper.feed_file(source, node, location, path)
    return keeper.document() | keep_telemetry(telemetry or {}, limits)


def bundle_place(source: str, node: str | None, name: str) -> str:
    """Where a file read on a node or the controller lies in a bundle (docs/bundle.md): a node's kernel and
    Fabric Manager logs under nodes/<node>/, a job's output under job/. Replay reads it from there, so a job's
    output is read as job output again (its trust mark) and a node's log as that node's."""
    from attribution.collect.bundle import FABRICMANAGER_LOG, KERNEL_LOG

    if source == "job":
        return f"job/{Path(name).name}"
    return f"nodes/{node}/" + {"kernel": KERNEL_LOG, "fabricmanager": FABRICMANAGER_LOG}.get(source, Path(name).name)


def keep_telemetry(telemetry: Mapping, limits: Limits = Limits()) -> dict:
    """{"telemetry": {node: {phase: snapshot}}} for the nodes whose snapshots fit in the bound, in node order;
    with "telemetry_truncated" when some did not."""
    from attribution.collect.telemetry import snapshot_to_json

    return bound_telemetry({node: {s.phase: snapshot_to_json(s) for s in pair if s is not None}
                            for node, pair in telemetry.items()}, limits)


def merge_piece(doc: Mapping | None, key: str, piece: Mapping, limits: Limits = Limits()) -> dict:
    """The job's document with one reporter's piece (`key`: the reporter, e.g. `node/g01`) put in: that
    reporter's earlier lines and snapshots replaced (and any file of the document at a place the piece holds),
    everything else kept: the document is the union of the pieces. The bounds hold for the job: when the union
    is over them, prefilter hits go first, then error-looking lines, each by reporter, file and line. A document
    kept whole from a bundle is the piece `bundle`."""
    doc = dict(doc or {})
    pieces = dict(doc.get("pieces") or {})
    files = [dict(f, piece=f.get("piece") or "bundle") for f in doc.get("files", ())]
    streams = [dict(f, piece=f.get("piece") or "bundle") for f in doc.get("streams", ())]
    if doc and not pieces:
        pieces["bundle"] = _meta(doc)
    old = pieces.pop(key, None) or {}
    places = {f["file"] for f in piece.get("files", ())}
    files = [f for f in files if f["piece"] != key and f["file"] not in places]
    files += [dict(f, piece=key) for f in piece.get("files", ())]
    read = {s["location"] for s in piece.get("streams", ())}
    streams = [s for s in streams if s["piece"] != key and s["location"] not in read]
    streams += [dict(s, piece=key) for s in piece.get("streams", ())]
    gone = set(old.get("telemetry", ()))
    tel = {n: p for n, p in (doc.get("telemetry") or {}).items() if n not in gone}
    tel.update(piece.get("telemetry") or {})
    gone = set(old.get("metrics", ()))
    series = {n: s for n, s in ((doc.get("metrics") or {}).get("nodes") or {}).items() if n not in gone}
    series.update((piece.get("metrics") or {}).get("nodes") or {})
    labels = (piece.get("metrics") or doc.get("metrics") or {}).get("labels") or {}
    pieces[key] = _meta(piece)
    kept, cut = _bound_files(files + streams, limits)
    files = [f for f in kept if "reader" not in f]
    streams = [s for s in kept if "reader" in s]
    kept_tel = bound_telemetry(tel, limits)
    out = {"format": FORMAT, "rules_version": piece.get("rules_version") or doc.get("rules_version"),
           "truncated": cut or any(p["truncated"] for p in pieces.values()),
           "candidates": sum(p["candidates"] for p in pieces.values()), "files": files, "pieces": pieces}
    if streams:
        out["streams"] = streams
    if any(p["telemetry_truncated"] for p in pieces.values()):
        kept_tel["telemetry_truncated"] = True
    if series:
        kept_tel |= bound_metrics(series, labels, limits)
    if any(p.get("metrics_truncated") for p in pieces.values()):
        kept_tel["metrics_truncated"] = True
    return out | kept_tel


def bound_piece(piece: Mapping, used_lines: int, used_bytes: int, used_telemetry: int,
                limits: Limits = Limits()) -> tuple[dict, int, int, int]:
    """One reporter's piece within what the job's other pieces left of its bounds (`used_*`: theirs), prefilter
    hits first: (the piece, its lines, their bytes (line_cost), its snapshots' JSON bytes). Stored apart, the
    pieces are joined when read (merge_piece), so a report costs its own piece, not the job's whole evidence."""
    left = Limits(lines=max(0, limits.lines - used_lines), bytes=max(0, limits.bytes - used_bytes),
                  line_chars=limits.line_chars, telemetry_bytes=max(0, limits.telemetry_bytes - used_telemetry),
                  metric_bytes=limits.metric_bytes)
    out = dict(piece)
    files, cut = _bound_files(list(piece.get("files", ())) + list(piece.get("streams", ())), left)
    out["files"] = [f for f in files if "reader" not in f]
    streams = [f for f in files if "reader" in f]
    if streams or "streams" in out:
        out["streams"] = streams
    out["truncated"] = bool(piece.get("truncated")) or cut
    if piece.get("telemetry"):
        kept = bound_telemetry(piece["telemetry"], left)
        out["telemetry"] = kept["telemetry"]
        if kept.get("telemetry_truncated"):
            out["telemetry_truncated"] = True
    lines = sum(len(f["lines"]) for f in files)
    size = sum(line_cost(ln[1]) for f in files for ln in f["lines"])
    tel = len(json.dumps(out.get("telemetry") or {}, separators=(",", ":"))) if out.get("telemetry") else 0
    return out, lines, size, tel


def _meta(piece: Mapping) -> dict:
    meta = {"rules_version": piece.get("rules_version"), "truncated": bool(piece.get("truncated")),
            "candidates": int(piece.get("candidates") or 0), "telemetry": sorted(piece.get("telemetry") or ()),
            "telemetry_truncated": bool(piece.get("telemetry_truncated"))}
    if piece.get("metrics"):  # a connector's piece: the nodes whose metric series it kept
        meta["metrics"] = sorted((piece["metrics"].get("nodes") or {}))
        meta["metrics_truncated"] = bool(piece.get("metrics_truncated"))
    return meta


def _bound_files(files: list[dict], limits: Limits) -> tuple[list[dict], bool]:
    """The lines of the files (and connector streams) within the bounds (see merge_piece), and whether some were
    left out."""
    lines = [(0 if PREFILTER in ln[2] else 1, f.get("piece") or "", f.get("file") or f.get("location") or "",
              ln[0], i) for i, f in enumerate(files) for ln in f["lines"]]
    total = sum(line_cost(ln[1]) for f in files for ln in f["lines"])
    if len(lines) <= limits.lines and total <= limits.bytes:
        return files, False
    text = {(i, ln[0]): ln for i, f in enumerate(files) for ln in f["lines"]}
    keep: set[tuple[int, int]] = set()
    size = 0
    for _, _, _, lineno, i in sorted(lines):
        n = line_cost(text[(i, lineno)][1])
        if len(keep) >= limits.lines or size + n > limits.bytes:
            break
        keep.add((i, lineno))
        size += n
    out = []
    for i, f in enumerate(files):
        kept = [ln for ln in f["lines"] if (i, ln[0]) in keep]
        if kept:
            out.append(dict(f, lines=kept))
    return out, True


def kept_telemetry(doc: Mapping) -> dict:
    """The kept snapshots as {node: (prolog, epilog)}, what the counter rules read."""
    from attribution.collect.telemetry import snapshot_from_json

    tel = doc.get("telemetry")
    if not isinstance(tel, Mapping):
        return {}
    return {node: tuple(snapshot_from_json(phases[p]) if phases.get(p) else None for p in ("prolog", "epilog"))
            for node, phases in tel.items()}
