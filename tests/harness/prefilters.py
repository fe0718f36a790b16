"""Prefilters for tests: `AllLines` selects every line, for tests that want to see all observations."""

from __future__ import annotations


class AllLines:
    """A prefilter that selects every line (the collectors' `find(block, end) -> offsets` interface)."""

    _rx = None

    def find(self, block: bytes, end: int | None = None) -> list[int]:
        end = len(block) if end is None else end
        out = [0] if end else []
        i = block.find(b"\n", 0, end)
        while i >= 0 and i + 1 < end:
            out.append(i + 1)
            i = block.find(b"\n", i + 1, end)
        return out
