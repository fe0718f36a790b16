"""The line prefilter: one pass over raw bytes finding every line any rule of a source could match.

Also where every pattern is compiled: with RE2, a linear-time engine, so no rule can backtrack catastrophically.
"""

from __future__ import annotations

import re
from typing import Iterable

import re2


def _options() -> re2.Options:
    o = re2.Options()
    o.log_errors = False
    o.max_mem = 64 << 20
    return o


def compile_re2(pattern: str | bytes):
    """Compile with RE2 (linear time). Raises re2.error for syntax RE2 does not accept (backreferences, lookaround)."""
    return re2.compile(pattern, _options())


def search_set(patterns: Iterable[str]):
    """One RE2 set of the patterns: which of them match a text, in one pass."""
    s = re2.Set.SearchSet(_options())
    for p in patterns:
        s.Add(p)
    s.Compile()
    return s


def scan_pattern(pattern: str) -> str:
    """A rule pattern turned into a scan pattern for raw lines: message anchors and capture names dropped."""
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    p = re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", p)
    return p


class Prefilter:
    """One pass over raw bytes finding every line any rule of a source could match.

    RE2 decides which lines match (one alternation of the rules' patterns, searched again from the next line
    after each hit). When Hyperscan is installed (SIMD multi-pattern automata, linear time like RE2, several
    times faster) it goes first over windows of ~64 KB cut at line ends and stops at the first match; RE2 then
    only searches the windows with a match. The lines found are RE2's either way; Hyperscan only skips the
    windows without any, which at realistic fault rates is nearly all of a log.
    """

    __slots__ = ("_rx", "pattern", "patterns", "_hs", "_hs_tried", "_extended", "_hs_blob", "unless", "_local")

    WINDOW = 64 << 10

    def __init__(self, patterns: Iterable[str], unless: Iterable[str] = ()) -> None:
        """`unless`: patterns of lines never to select, whatever `patterns` find in them (the error-looking
        filter's informational levels, rules/replay/error-lines.txt)."""
        self.patterns = tuple(patterns)
        unless = tuple(unless)
        self.unless = Prefilter(unless) if unless else None
        alts = [f"(?:{p})" for p in self.patterns]
        self.pattern = "(?m)" + "|".join(alts) if alts else r"(?m)\A\z"
        self._rx = compile_re2(self.pattern.encode("utf-8"))
        self._hs = None
        self._hs_tried = False
        self._hs_blob: bytes | None = None  # a serialized database (the pack's cache), loaded on first use
        self._extended: dict[tuple[str, ...], Prefilter] = {}

    def extended(self, extra: Iterable[str]) -> Prefilter:
        """This prefilter with more patterns (a collector's structural ones, e.g. traceback headers), so that one
        pass finds both. Built once per prefilter and kept with it (and in the rule pack's cache)."""
        extra = tuple(p for p in extra if p not in self.patterns)
        if not extra:
            return self
        pf = self._extended.get(extra)
        if pf is None:
            pf = self._extended[extra] = Prefilter(self.patterns + extra,
                                                   self.unless.patterns if self.unless else ())
        return pf

    def find(self, block: bytes, end: int | None = None) -> list[int]:
        """Sorted offsets in `block[:end]`, one on each line with a match (and none that `unless` matches)."""
        found = self._find(block, end)
        if self.unless is None or not found:
            return found
        n = len(block) if end is None else end
        out = []
        for pos in found:
            start = block.rfind(b"\n", 0, pos) + 1
            stop = block.find(b"\n", pos, n)
            if not self.unless.find_re2(block, start, n if stop < 0 else stop):
                out.append(pos)
        return out

    def warm(self) -> None:
        """Load or compile the Hyperscan database now (a service worker does it at its start, off the request
        path; otherwise the first search does). A search meanwhile uses RE2, with the same offsets."""
        if self._hs_tried:
            return
        self._hs_tried = True
        hs = _loaded(self._hs_blob) if self._hs_blob is not None else None
        self._hs_blob = None
        self._hs = hs if hs is not None else hyperscan_database(self.patterns)

    def _find(self, block: bytes, end: int | None) -> list[int]:
        n = len(block) if end is None else end
        self.warm()
        if self._hs is None:
            return self.find_re2(block, 0, n)
        out: list[int] = []
        view = memoryview(block)
        pos = 0
        while pos < n:
            end = pos + self.WINDOW
            if end >= n:
                end = n
            else:
                nl = block.find(b"\n", end, n)
                end = n if nl < 0 else nl + 1
            if self._any(view[pos:end]):
                out += self.find_re2(block, pos, end)
            pos = end
        return out

    def _scratch(self):
        """This thread's Hyperscan scratch space: a scan needs one no other scan uses at the same time (the service
        parses reports in several threads), so each thread clones the database's own once."""
        try:
            local = self._local
        except AttributeError:  # made without __init__ (a cached pack): the first scan makes it
            import threading

            local = self._local = threading.local()
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = self._hs.scratch.clone()
        return scratch

    def _any(self, window) -> bool:
        import hyperscan

        try:
            self._hs.scan(window, match_event_handler=_stop, scratch=self._scratch())
        except hyperscan.ScanTerminated:
            return True
        except TypeError:
            if isinstance(window, bytes):
                raise
            # hyperscan 0.7.8 (the last release with Python 3.9 wheels) scans bytes only, not a memoryview
            return self._any(bytes(window))
        return False

    def find_re2(self, block: bytes, pos: int = 0, endpos: int | None = None) -> list[int]:
        # search again from the next line after each hit: resuming at the end of the match would skip the next
        # line when a match runs on past its line (`\s*` eats a newline)
        endpos = len(block) if endpos is None else endpos
        out = []
        search = self._rx.search
        while pos < endpos and (m := search(block, pos, endpos)) is not None:
            start = m.start()
            out.append(start)
            nl = block.find(b"\n", start, endpos)
            if nl < 0:
                break
            pos = nl + 1
        return out


def _stop(*_args) -> bool:
    return True  # a match: stop scanning this window


def _loaded(blob: bytes):
    """A database serialized by hyperscan.dumpb, or None (no Hyperscan here, or another build: compile instead)."""
    try:
        import hyperscan

        db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)  # a deserialized database comes without one
        return db
    except Exception:
        return None


def hyperscan_database(patterns: tuple[str, ...]):
    """A Hyperscan block-mode database of the patterns (multi-line), or None when
    Hyperscan is not installed (it has wheels for x86-64 Linux) or refuses a pattern."""
    if not patterns:
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    flags = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY | hyperscan.HS_FLAG_SINGLEMATCH
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[p.encode("utf-8") for p in patterns], ids=list(range(len(patterns))),
                   elements=len(patterns), flags=[flags] * len(patterns))
    except hyperscan.error:
        return None
    return db
