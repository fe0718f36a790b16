"""The error-looking lines of a pack (rules/replay/error-lines.txt, docs/replay.md): what is kept for replay
besides the prefilter hits, and what `rules suggest` mines. One RE2 pattern a line, matched case-insensitively;
a line starting with `!` gives a pattern of lines that are never error-looking, whatever the others find in them
(informational levels: an NCCL `INFO` line that says "Failed to open libibverbs.so" reports nothing wrong).
Read without YAML (the node agent builds the filter when its cached pack has none)."""

from __future__ import annotations

from pathlib import Path

ERROR_LINES_FILE = Path("replay") / "error-lines.txt"


def _file(rules_dir: Path | str | None) -> Path | None:
    from attribution.resources import rules_dir as shipped

    for root in ([Path(rules_dir)] if rules_dir else []) + [shipped()]:
        path = root / ERROR_LINES_FILE
        if path.is_file():
            return path
    return None


def _patterns(rules_dir: Path | str | None, negated: bool) -> tuple[str, ...]:
    path = _file(rules_dir)
    if path is None:
        return ()
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        s = raw.strip()
        if not s or s.startswith("#") or s.startswith("!") != negated:
            continue
        out.append(f"(?i:{s[1:].strip() if negated else s})")
    return tuple(out)


def error_line_patterns(rules_dir: Path | str | None = None) -> tuple[str, ...]:
    """The error-looking patterns of a rule pack (falls back to the shipped pack's when it has none)."""
    return _patterns(rules_dir, negated=False)


def informational_line_patterns(rules_dir: Path | str | None = None) -> tuple[str, ...]:
    """The patterns of lines that are never error-looking (the `!` lines of the same file)."""
    return _patterns(rules_dir, negated=True)
