"""The error-looking lines of a pack (rules/replay/error-lines.txt, docs/replay.md): what is kept for replay
besides the prefilter hits. One RE2 pattern a line, matched case-insensitively. Read without YAML (the node agent
builds the filter when its cached pack has none)."""

from __future__ import annotations

from pathlib import Path

ERROR_LINES_FILE = Path("replay") / "error-lines.txt"


def error_line_patterns(rules_dir: Path | str | None = None) -> tuple[str, ...]:
    """The error-looking patterns of a rule pack (falls back to the shipped pack's when it has none)."""
    from attribution.resources import rules_dir as shipped

    for root in ([Path(rules_dir)] if rules_dir else []) + [shipped()]:
        path = root / ERROR_LINES_FILE
        if path.is_file():
            out = []
            for raw in path.read_text(encoding="utf-8").splitlines():
                s = raw.strip()
                if s and not s.startswith("#"):
                    out.append(f"(?i:{s})")
            return tuple(out)
    return ()
