"""What every benchmark shares: its result row, the paths, the machine and its load, docs/performance.md."""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "attribution"


@dataclass
class Result:
    name: str
    ours: str
    baseline: str
    ratio: str
    target: str
    met: bool | None
    notes: list[str] = field(default_factory=list)


def loadavg() -> str:
    """The 1-minute load average and how many processes are runnable: the neighbours' share of the machine."""
    try:
        parts = Path("/proc/loadavg").read_text().split()
        return f"load {parts[0]} ({parts[3]} runnable/total)"
    except (OSError, IndexError):
        return "load unknown"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.platform()}, Python {platform.python_version()}"


TABLE_HEAD = "| benchmark | ours | baseline (same run) | ratio | target | met |"


def row_id(text: str) -> str:
    """A row's number in the table ("2", "5b"): what its name starts with, before the first '. '."""
    return text.split(". ", 1)[0].strip()


def _row(r: Result) -> str:
    met = {True: "yes", False: "**no**", None: "-"}[r.met]
    return f"| {r.name} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {met} |"


def _note_label(r: Result) -> str:
    label = r.name
    for stop in (":", ",", " ("):
        label = label.split(stop, 1)[0]
    return label


def render(results: list[Result]) -> list[str]:
    """The table rows and the notes of `results`."""
    return [_row(r) for r in results] + [""] + [f"- {_note_label(r)}: {n}" for r in results for n in r.notes]


def merge_report(existing: str, results: list[Result]) -> str:
    """docs/performance.md with the rows and notes of `results` replaced (or added, for a new row), the other rows,
    their notes and the rest of the page kept as they are: `--only` measures some rows, not the page."""
    lines = existing.split("\n")
    head = lines.index(TABLE_HEAD)
    i = head + 2
    rows: list[str] = []
    while i < len(lines) and lines[i].startswith("| "):
        rows.append(lines[i])
        i += 1
    j = i + 1 if i < len(lines) and lines[i] == "" else i
    notes: list[str] = []
    while j < len(lines) and lines[j].startswith("- "):
        notes.append(lines[j])
        j += 1
    new = {row_id(r.name): r for r in results}
    out_rows = [(_row(new[row_id(x[2:])]) if row_id(x[2:]) in new else x) for x in rows]
    seen = {row_id(x[2:]) for x in rows}
    out_rows += [_row(r) for k, r in new.items() if k not in seen]
    out_notes: list[str] = []
    placed: set[str] = set()
    for x in notes:
        k = row_id(x[2:])
        if k not in new:
            out_notes.append(x)
        elif k not in placed:
            placed.add(k)
            out_notes += [f"- {_note_label(new[k])}: {n}" for n in new[k].notes]
    for k, r in new.items():
        if k not in placed:
            out_notes += [f"- {_note_label(r)}: {n}" for n in r.notes]
    return "\n".join(lines[:head + 2] + out_rows + [""] + out_notes + lines[j:])


def write_report(results: list[Result], quick: bool, path: Path | None, loads: list[str]) -> str:
    """The rows and notes of this run; merged into `path` (docs/performance.md) when one is given and holds the
    table, else a new page written there (None: printed only)."""
    text = "\n".join([f"Measured by `python -m bench.run` {'with --quick (small sizes)' if quick else 'at full size'} "
                      f"on {time.strftime('%Y-%m-%d')}; machine: {machine()}", "", "load: " + "; ".join(loads), "",
                      TABLE_HEAD, "|---|---|---|---|---|---|", *render(results)]) + "\n"
    if path is None:
        return text
    existing = path.read_text() if path.exists() else ""
    if TABLE_HEAD in existing.split("\n"):
        path.write_text(merge_report(existing, results))
    else:
        path.write_text("# Performance\n\n" + text)
    return text
