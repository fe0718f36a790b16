"""The rule pack compiled once and kept on disk, keyed by the pack's digest (what the central commands, the controller's
epilog and the service load).

Loading a pack reads YAML, checks every file against its JSON Schema and compiles a few hundred RE2 patterns and
one Hyperscan database per source: about 100-200 ms of CPU, spent again by every fresh process. `cached_rules`
does it once per pack and interpreter and keeps the result in ``<cache_dir>/rules-<key>.pickle``; the key hashes
every file of the pack (path and bytes, schemas included), this package's version and the interpreter, so a
changed pack, an upgrade or another Python never reads a stale entry. From the cache:

- no YAML, no JSON Schema (neither module is imported);
- RE2 patterns compile lazily, on first use (a clean log of one source never compiles the rules of the others);
- each Hyperscan database is the serialized one (``hyperscan.dumpb``/``loadb``), not compiled again.

A cache file is a pickle, so it is trusted only when this process's user owns it and its folder and neither is
writable by group or others; anything else is ignored (the pack is loaded from source) and never overwritten.
Any failure reading or writing the cache falls back to loading the pack: the cache can only make it faster.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import pickle
import stat
import sys
from pathlib import Path
from types import MappingProxyType

__all__ = ["pack_key", "cached_rules", "rules_and_saver", "LazyRegex", "LazySet"]

FORMAT = "3"  # bump when what is pickled changes shape


def default_cache_dir() -> Path:
    """Where the compiled rule pack is kept: ``$ATTRIBUTION_CACHE_DIR``, else ``$ATTRIBUTION_HOME/cache``, else
    ``/var/cache/attribution`` for root and ``$XDG_CACHE_HOME/attribution`` (``~/.cache/attribution``) for others.
    Entries are trusted only when this user owns them and their folder and neither is writable by group or
    others."""
    env = os.environ.get("ATTRIBUTION_CACHE_DIR")
    if env:
        return Path(env)
    home = os.environ.get("ATTRIBUTION_HOME")
    if home:
        return Path(home) / "cache"
    if os.geteuid() == 0:
        return Path("/var/cache/attribution")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attribution"


def pack_key(root: Path) -> str:
    """The cache key of the pack in `root`: every file under it (relative path and bytes), with this package's
    version and the interpreter's cache tag. Costs a directory walk and reading ~250 KB."""
    from attribution.resources import version

    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{version()}\0{sys.implementation.cache_tag}\0{_hyperscan_tag()}\0".encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p.relative_to(root))):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in rel.parts)


def _hyperscan_tag() -> str:
    spec = importlib.util.find_spec("hyperscan")  # without importing it (nor importlib.metadata: ~30 ms)
    if spec is None or not spec.origin:
        return "nohs"
    try:
        st = os.stat(spec.origin)
    except OSError:
        return "nohs"
    return f"hs:{spec.origin}:{st.st_size}:{st.st_mtime_ns}"


def cached_rules(directory: Path | str | None = None, cache_dir: Path | str | None = None):
    """The rule pack in `directory` (default: the shipped one), from the cache when it holds this pack, else
    loaded (and validated: RulePackError as load_rules raises it) and then cached. `cache_dir` None: no cache."""
    rs, save = rules_and_saver(directory, cache_dir)
    save()
    return rs


def rules_and_saver(directory: Path | str | None = None, cache_dir: Path | str | None = None):
    """(the pack, a function writing it to the cache): the caller may write the cache when its urgent work is
    done (the node agent, after delivering its report: serializing compiles every source's Hyperscan database).
    The function does nothing when there is no cache, or when the pack came from the cache and no prefilter was
    extended since (a collector's structural patterns, `Prefilter.extended`: then it is written again, with
    them compiled)."""
    from attribution.resources import rules_dir

    root = Path(directory) if directory else rules_dir()
    if cache_dir is None or not root.is_dir():
        from attribution.rulepack.load import load_rules

        return load_rules(root), _nothing
    cache_dir = Path(cache_dir)
    try:
        key = pack_key(root)
    except OSError:
        key = None
    path = cache_dir / f"rules-{key}.pickle" if key else None
    if path is not None:
        rs = _read(path, root)
        if rs is not None:
            known = _extensions(rs)
            return rs, (lambda: _write(path, rs) if _extensions(rs) > known else None)
    from attribution.rulepack.load import load_rules

    rs = load_rules(root)
    return rs, (lambda: _write(path, rs)) if path is not None else _nothing


def _extensions(rs) -> int:
    return sum(len(pf._extended) for pf in rs._prefilters.values())  # noqa: SLF001


def _nothing() -> None:
    pass


# -- reading ---------------------------------------------------------------------------------------------


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: Path, root: Path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _trusted(st) or not _trusted(os.stat(path.parent)):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        rs = pickle.loads(data)
    except Exception:  # a cache from a broken write or an incompatible build: load the pack instead
        return None
    from attribution.rulepack.values import RuleSet

    if not isinstance(rs, RuleSet):
        return None
    # the pack may have been copied elsewhere since: report where it is now
    return rs if rs.root == str(root) else _with(rs, root=str(root))


def _with(rs, **changes):
    from attribution.frozen import replace

    return replace(rs, **changes)


# -- writing ---------------------------------------------------------------------------------------------


def _write(path: Path, rs) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _trusted(os.stat(path.parent)):
            return
        buf = io.BytesIO()
        _Pickler(buf).dump(rs)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(buf.getvalue())
        finally:
            os.close(fd)
        os.replace(tmp, path)
        for old in path.parent.glob("rules-*.pickle"):  # earlier packs' entries
            if old != path:
                old.unlink(missing_ok=True)
    except Exception:  # a read-only or full disk, an object that does not pickle: run without the cache
        try:
            tmp.unlink(missing_ok=True)  # type: ignore[possibly-undefined]
        except Exception:
            pass


class _Pickler(pickle.Pickler):
    """Pickles a RuleSet: compiled RE2 objects as their patterns (compiled again lazily), RE2 sets as their
    rules' patterns, Hyperscan databases serialized, read-only mappings as dicts."""

    def reducer_override(self, obj):
        import re2

        from attribution.frozen import fields
        from attribution.rulepack.prefilter import Prefilter
        from attribution.rulepack.values import Redactions, RuleSet

        if isinstance(obj, MappingProxyType):
            return _proxy, (dict(obj),)
        if isinstance(obj, LazyRegex):
            return LazyRegex, (obj.source,)
        if isinstance(obj, re2._Regexp):  # noqa: SLF001 (google-re2's compiled pattern type)
            return LazyRegex, (obj.pattern,)
        if isinstance(obj, Prefilter):
            return _prefilter, (obj.patterns, obj.pattern, _hs_bytes(obj),
                                dict(obj._extended), obj.unless)  # noqa: SLF001
        if type(obj) is Redactions:  # its RE2 set as its patterns (built again on first use)
            return _redactions, (obj.patterns,)
        if isinstance(obj, LazySet):
            return LazySet, (obj.patterns,)
        if type(obj) is RuleSet:
            state = {f: getattr(obj, f) for f in fields(obj) if f != "_sets"}
            sets = {source: tuple(r.pattern for r in rules) for source, rules in obj._by_source.items()}
            return _ruleset, (state, sets)
        return NotImplemented


def _hs_bytes(pf) -> bytes | None:
    from attribution.rulepack.prefilter import hyperscan_database

    try:
        import hyperscan
    except ImportError:
        return None
    if not pf._hs_tried and pf._hs_blob is not None:  # noqa: SLF001  (read from a cache, not used since)
        return pf._hs_blob  # noqa: SLF001
    db = pf._hs if pf._hs_tried else hyperscan_database(pf.patterns)  # noqa: SLF001
    return hyperscan.dumpb(db) if db is not None else None


# -- what the pickle is rebuilt with -----------------------------------------------------------------------


class LazyRegex:
    """An RE2 pattern compiled on first use (with the pack's options), then the compiled object's methods."""

    __slots__ = ("source", "_rx")

    def __init__(self, source) -> None:
        self.source = source
        self._rx = None

    def __getattr__(self, name):
        rx = self._rx
        if rx is None:
            from attribution.rulepack.prefilter import compile_re2

            rx = self._rx = compile_re2(self.source)
        return getattr(rx, name)


class LazySet:
    """An RE2 set of the patterns, built on the first Match (as rulepack.load builds it)."""

    __slots__ = ("patterns", "_set")

    def __init__(self, patterns) -> None:
        self.patterns = tuple(patterns)
        self._set = None

    def Match(self, text):  # noqa: N802 (re2.Set's name)
        s = self._set
        if s is None:
            import re2

            from attribution.rulepack.prefilter import _options

            s = re2.Set.SearchSet(_options())
            for p in self.patterns:
                s.Add(p)
            s.Compile()
            self._set = s
        return s.Match(text)


def _proxy(d: dict) -> MappingProxyType:
    return MappingProxyType(d)


def _prefilter(patterns, pattern: str, hs: bytes | None, extended: dict | None = None, unless=None):
    from attribution.rulepack.prefilter import Prefilter

    pf = Prefilter.__new__(Prefilter)
    pf.patterns = tuple(patterns)
    pf.pattern = pattern
    pf._rx = LazyRegex(pf.pattern.encode("utf-8"))  # noqa: SLF001
    pf._hs = None  # noqa: SLF001
    pf._hs_tried = False  # noqa: SLF001
    pf._extended = dict(extended or {})  # noqa: SLF001
    pf._hs_blob = hs  # noqa: SLF001  (loaded on first use: a node reads one or two of the sources)
    pf.unless = unless
    return pf


def _redactions(patterns: tuple):
    from attribution.rulepack.values import Redactions, matcher_patterns

    return Redactions(tuple(patterns), LazySet(matcher_patterns(patterns)) if patterns else None)


def _ruleset(state: dict, sets: dict):
    from attribution.rulepack.values import RuleSet

    return RuleSet(**state, _sets=MappingProxyType({k: LazySet(v) for k, v in sets.items()}))
