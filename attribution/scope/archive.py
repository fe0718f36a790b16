"""An incident bundle sent as a tar.gz archive, unpacked safely into a directory of the caller's choosing.

Members are read as a stream, one at a time, and each is checked before it is written: no absolute names, no
`..`, no links or writes that leave the directory (tarfile's "data" filter: it also refuses device files and drops
set-uid bits), at most `max_files` members and `max_bytes` bytes unpacked. A gzip bomb therefore costs at most
those limits. The bundle's context.yaml must be of sane size and name a sane number of nodes. Problems raise
InputError naming the member; the partly unpacked directory is the caller's to remove.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from attribution.errors import InputError

ARCHIVE = "bundle.tar.gz"


@dataclass(frozen=True)
class ArchiveLimits:
    max_files: int = 10000
    max_bytes: int = 512 * 1024 * 1024
    max_context_bytes: int = 1024 * 1024  # context.yaml
    max_nodes: int = 100000  # the nodes its node list expands to
    max_depth: int = 16  # folders inside one another (a bundle needs 3: nodes/<node>/telemetry)
    max_name_bytes: int = 1024  # one member's path


def unpack(stream: BinaryIO, dest: Path, limits: ArchiveLimits) -> Path:
    """Unpack the archive into `dest` (an empty directory); returns the bundle's folder: `dest` when the archive
    has context.yaml at its top, or its single top-level folder that has it."""
    files = 0
    total = 0
    sizes: dict[str, int] = {}
    try:
        with tarfile.open(fileobj=stream, mode="r|gz", encoding="utf-8", errors="surrogateescape") as tar:
            for member in tar:
                files += 1
                if files > limits.max_files:
                    raise InputError(ARCHIVE, f"more than {limits.max_files} members")
                _check_name(member, limits)
                if member.isreg():
                    size = member.size
                elif member.islnk():  # a hard link is read as often as it is named: it counts its target's size
                    size = sizes.get(os.path.normpath(member.linkname), 0)
                elif member.isdir() or member.issym():
                    size = 0
                else:
                    raise InputError(ARCHIVE, f"{member.name}: not a file, folder or link")
                sizes[os.path.normpath(member.name)] = size
                total += size
                if total > limits.max_bytes:
                    raise InputError(ARCHIVE, f"more than {limits.max_bytes} bytes unpacked")
                _extract(tar, member, dest)
    except InputError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError, UnicodeError) as exc:
        raise InputError(ARCHIVE, f"not a readable tar.gz archive: {_first_line(exc) or type(exc).__name__}") \
            from None
    if files == 0:
        raise InputError(ARCHIVE, "empty archive")
    check_read_size(dest, limits)
    root = bundle_root(dest)
    check_context_size(root / "context.yaml", limits)
    return root


def _check_name(member: tarfile.TarInfo, limits: ArchiveLimits) -> None:
    """Member names are UTF-8, of sane length and depth (issue 18, L1: each of these was a 500)."""
    name = member.name
    try:
        raw = name.encode("utf-8")
        member.linkname.encode("utf-8")
    except UnicodeEncodeError:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise InputError(ARCHIVE, f"{shown[:200]}: member name is not UTF-8") from None
    if len(raw) > limits.max_name_bytes:
        raise InputError(ARCHIVE, f"{name[:80]}...: member name longer than {limits.max_name_bytes} bytes")
    if len([p for p in name.split("/") if p not in ("", ".")]) > limits.max_depth:
        raise InputError(ARCHIVE, f"{name[:80]}...: more than {limits.max_depth} folders deep")


def check_read_size(dest: Path, limits: ArchiveLimits) -> None:
    """What diagnosing the bundle will read, counted as the collectors read it: every name of a file (hard links
    and symbolic links to files included) at its size; a symbolic link to a folder is refused (it would make
    the collectors read a folder twice). Bounded by max_bytes (issue 18, M5)."""
    import stat as st

    total = 0
    for top, dirs, names in os.walk(dest):
        for d in dirs:
            if os.path.islink(os.path.join(top, d)):
                raise InputError(ARCHIVE, f"{os.path.relpath(os.path.join(top, d), dest)}: a link to a folder")
        for n in names:
            try:
                s = os.stat(os.path.join(top, n))  # follows links (inside the bundle: the filter saw to it)
            except OSError:
                continue  # a dangling link: read as missing
            if st.S_ISREG(s.st_mode):
                total += s.st_size
                if total > limits.max_bytes:
                    raise InputError(ARCHIVE, f"more than {limits.max_bytes} bytes to read (links count at the "
                                              f"size of what they name)")


def bundle_root(dest: Path) -> Path:
    if (dest / "context.yaml").is_file():
        return dest
    tops = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(tops) == 1 and tops[0].is_dir() and not tops[0].is_symlink() and (tops[0] / "context.yaml").is_file():
        return tops[0]
    raise InputError(ARCHIVE, "no context.yaml at the top of the archive or in its single top-level folder")


def check_context_size(context_file: Path, limits: ArchiveLimits) -> None:
    """Refuse an absurd context.yaml (huge, or a node list expanding to an absurd number of nodes) before the
    engine reads it. Anything merely malformed is left to the engine, which names the line."""
    import hostlist
    import yaml

    try:
        if context_file.stat().st_size > limits.max_context_bytes:
            raise InputError("context.yaml", f"larger than {limits.max_context_bytes} bytes")
        data = yaml.safe_load(context_file.read_text(encoding="utf-8", errors="replace"))
    except (yaml.YAMLError, OSError):
        return
    nodes = data.get("nodes") if isinstance(data, dict) else None
    total = 0
    for item in nodes if isinstance(nodes, list) else [nodes]:
        try:
            total += len(hostlist.expand_hostlist(item)) if isinstance(item, str) else 1
        except hostlist.BadHostlist:
            return
        if total > limits.max_nodes:
            raise InputError("context.yaml", f"nodes: more than {limits.max_nodes} nodes")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    if HAS_FILTERS:
        try:
            tar.extract(member, dest, filter="data")
        except tarfile.FilterError as exc:
            raise InputError(ARCHIVE, f"{member.name}: refused: {_refusal(exc)}") from None
        return
    problem = refusal_without_filters(member, dest)
    if problem:
        raise InputError(ARCHIVE, f"{member.name}: refused: {problem}")
    # no owner, mode or time from the archive (the "data" filter keeps only safe mode bits; this keeps none)
    tar.extract(member, dest, set_attrs=False)


#: extraction filters arrived in Python 3.11.4 (and 3.12); Debian 12's 3.11.2 has none
HAS_FILTERS = hasattr(tarfile, "data_filter")


def refusal_without_filters(member: tarfile.TarInfo, dest: Path) -> str | None:
    """The "data" filter's checks, for a Python without extraction filters: why `member` may not be written
    under `dest`, or None. Paths are resolved as they are on disk now (links already unpacked count)."""
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        return "an absolute path"
    target = os.path.join(root, name)
    if not inside(target):
        return "it would be written outside the bundle"
    if member.issym():
        if os.path.isabs(member.linkname):
            return "a link to an absolute path"
        if not inside(os.path.join(os.path.dirname(target), member.linkname)):
            return "a link that leads outside the bundle"
    elif member.islnk():
        if os.path.isabs(member.linkname):
            return "a link to an absolute path"
        if not inside(os.path.join(root, member.linkname)):
            return "a link that leads outside the bundle"
    elif not (member.isreg() or member.isdir()):
        return "a device or other special file"
    return None


def _refusal(exc: tarfile.FilterError) -> str:
    """Why the filter refused a member, without the server's paths that tarfile puts in its messages."""
    if isinstance(exc, tarfile.AbsolutePathError):
        return "an absolute path"
    if isinstance(exc, tarfile.OutsideDestinationError):
        return "it would be written outside the bundle"
    if isinstance(exc, tarfile.AbsoluteLinkError):
        return "a link to an absolute path"
    if isinstance(exc, tarfile.LinkOutsideDestinationError):
        return "a link that leads outside the bundle"
    if isinstance(exc, tarfile.SpecialFileError):
        return "a device or other special file"
    return type(exc).__name__


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""
