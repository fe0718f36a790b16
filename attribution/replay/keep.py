"""The evidence kept for replay: from a bundle, the lines any rule's prefilter flagged and the error-looking lines
(rules/replay/error-lines.txt), bounded per job, with their source, node, file and line number; plus the counter
snapshots (telemetry, spec/bundle.md) of every node, parsed (what the counter rules read, in the report payload's
form: collect.telemetry.snapshot_to_json). See docs/replay.md.

The document is plain JSON (compressed by the store). Replaying it (attribution.replay.rederive) writes the kept
lines back at their line numbers, so the collectors read them exactly as they read the original files, and runs
the counter rules on the kept snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from typing import Mapping

from attribution.model import ExecutionContext
from attribution.rulepack.load import Prefilter, RuleSet, default_rules_dir

FORMAT = 1
ERROR_LINES_FILE = Path("replay") / "error-lines.txt"
#: Bounds per job: the kept lines, their text, one line's length, the telemetry snapshots.
MAX_LINES = 2000
MAX_BYTES = 1 << 20
MAX_LINE_CHARS = 4096
MAX_TELEMETRY_BYTES = 4 << 20  # of snapshot JSON: ~20 KiB a node of 8 GPUs and 8 HCAs, ~1 KiB compressed
READ_CHUNK = 8 << 20
#: Flags of a kept line: flagged by a rule's prefilter, error-looking.
PREFILTER, ERRORLIKE = "p", "e"


@dataclass(frozen=True)
class Limits:
    lines: int = MAX_LINES
    bytes: int = MAX_BYTES
    line_chars: int = MAX_LINE_CHARS
    telemetry_bytes: int = MAX_TELEMETRY_BYTES


def error_patterns(rules_dir: Path | str | None = None) -> tuple[str, ...]:
    """The error-looking patterns of a rule pack (falls back to the shipped pack's when it has none)."""
    for root in ([Path(rules_dir)] if rules_dir else []) + [default_rules_dir()]:
        path = root / ERROR_LINES_FILE
        if path.is_file():
            out = []
            for raw in path.read_text(encoding="utf-8").splitlines():
                s = raw.strip()
                if s and not s.startswith("#"):
                    out.append(f"(?i:{s})")
            return tuple(out)
    return ()


def errorlike_filter(rules_dir: Path | str | None = None) -> Prefilter:
    return Prefilter(error_patterns(rules_dir))


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


def keep_bundle(bundle: Path, ctx: ExecutionContext, ruleset: RuleSet, limits: Limits = Limits(),
                telemetry: Mapping | None = None) -> dict:
    """The evidence document of one bundle (see the module docstring); `telemetry` is its {node: (prolog,
    epilog)} snapshots as collected (collect.telemetry.collect_bundle_telemetry)."""
    errorlike = errorlike_filter(ruleset.root)
    candidates: list[tuple[int, str, str | None, str, int, str, str]] = []  # (priority, ...)
    for source, node, location, path in bundle_files(Path(bundle), ctx):
        base = 0
        try:
            for block in _read_chunks(path):
                for lineno, start, end, flags in flagged_lines(block, ruleset.prefilter(source), errorlike):
                    text = block[start:end].decode("utf-8", errors="replace").rstrip("\r")[:limits.line_chars]
                    candidates.append((0 if PREFILTER in flags else 1, source, node, location, base + lineno,
                                       text, flags))
                base += block.count(b"\n")
        except OSError:
            continue  # unreadable: the collector already records it in the coverage
    kept: list = []
    size = 0
    truncated = False
    for cand in sorted(candidates, key=lambda c: c[0]):  # prefilter hits first (they make the verdict), stable
        n = len(cand[5].encode()) + 1
        if len(kept) >= limits.lines or size + n > limits.bytes:
            truncated = True
            break
        kept.append(cand)
        size += n
    files: dict[tuple, dict] = {}
    for _, source, node, location, lineno, text, flags in sorted(kept, key=lambda c: (c[3], c[4])):
        f = files.setdefault((source, node, location), {"source": source, "node": node, "file": location,
                                                       "lines": []})
        f["lines"].append([lineno, text, flags])
    doc = {"format": FORMAT, "rules_version": ruleset.version, "truncated": truncated,
           "candidates": len(candidates), "files": list(files.values())}
    return doc | keep_telemetry(telemetry or {}, limits)


def keep_telemetry(telemetry: Mapping, limits: Limits = Limits()) -> dict:
    """{"telemetry": {node: {phase: snapshot}}} for the nodes whose snapshots fit in the bound, in node order;
    with "telemetry_truncated" when some did not."""
    import json

    from attribution.collect.telemetry import snapshot_to_json

    out: dict[str, dict] = {}
    left = limits.telemetry_bytes
    cut = False
    for node, pair in sorted(telemetry.items()):
        phases = {s.phase: snapshot_to_json(s) for s in pair if s is not None}
        size = len(json.dumps(phases, separators=(",", ":")))
        if size > left:
            cut = True
            continue
        left -= size
        out[node] = phases
    return {"telemetry": out} | ({"telemetry_truncated": True} if cut else {})


def kept_telemetry(doc: Mapping) -> dict:
    """The kept snapshots as {node: (prolog, epilog)}, what the counter rules read."""
    from attribution.collect.telemetry import snapshot_from_json

    tel = doc.get("telemetry")
    if not isinstance(tel, Mapping):
        return {}
    return {node: tuple(snapshot_from_json(phases[p]) if phases.get(p) else None for p in ("prolog", "epilog"))
            for node, phases in tel.items()}
