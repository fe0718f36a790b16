"""Prefilters for tests: `AllLines` selects every line, for tests that want to see all observations."""

from __future__ import annotations


class AllLines:
    """A prefilter that selects every line (the collectors' `find(block) -> offsets` interface)."""

    _rx = None

    def find(self, block: bytes) -> list[int]:
        out = [0] if block else []
        i = block.find(b"\n")
        while i >= 0 and i + 1 < len(block):
            out.append(i + 1)
            i = block.find(b"\n", i + 1)
        return out
