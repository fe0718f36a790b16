"""Text tables for the terminal: each column as wide as its widest value up to a cap, a longer value cut with `…`,
two spaces between columns, so that one column never runs into the next; the last column is never cut."""

from __future__ import annotations

from typing import Sequence

GAP = "  "
CUT = "…"


def fit(value: str, width: int) -> str:
    """`value` in at most `width` characters: cut, with `…` as its last character, when longer."""
    return value if len(value) <= width else value[:max(width - 1, 0)] + CUT


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], caps: Sequence[int]) -> list[str]:
    """The lines of a table (the header first). `caps` holds the widest each column but the last may be."""
    widths = [min(cap, max([len(h)] + [len(r[i]) for r in rows])) for i, (h, cap) in enumerate(zip(headers, caps))]

    def line(cells: Sequence[str]) -> str:
        first = [fit(c, w).ljust(w) for c, w in zip(cells, widths)]
        return GAP.join(first + list(cells[len(widths):])).rstrip()

    return [line(headers)] + [line(r) for r in rows]


__all__ = ["fit", "table"]
