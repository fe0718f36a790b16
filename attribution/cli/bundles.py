"""The incident bundles a command's arguments name (`ingest`, `diagnose`): a bundle folder, a bundle as a .tar.gz
archive, or a folder of either. An archive is unpacked (within the archive limits) into a temporary folder, and a
problem of it is named by the archive and the member inside it, never by the temporary folder."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
NOT_A_BUNDLE = "not a bundle (no context.yaml, not a .tar.gz)"


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def is_bundle_folder(path: Path) -> bool:
    return path.is_dir() and (path / "context.yaml").is_file()


def bundle_paths(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """The bundles the arguments name, in order, and the arguments that name none. A folder without context.yaml
    stands for the bundle folders and archives directly inside it, by name. A path that does not exist is bad
    input."""
    from attribution.errors import InputError

    found: list[Path] = []
    skipped: list[Path] = []
    for p in paths:
        if not p.exists() and not p.is_symlink():
            raise InputError(p, "no such file or directory")
        if is_bundle_folder(p) or is_archive(p):
            found.append(p)
        elif p.is_dir() and (inner := sorted(c for c in p.iterdir() if is_bundle_folder(c) or is_archive(c))):
            found.extend(inner)
        else:
            skipped.append(p)
    return found, skipped


@contextlib.contextmanager
def opened(bundle: Path) -> Iterator[Path]:
    """A bundle folder as it is, or an archive unpacked into a temporary folder (removed after). An InputError
    of the archive, of unpacking it or of what is read from it inside the block names the archive and the member."""
    from attribution.errors import InputError

    if bundle.is_file() and not is_archive(bundle):
        raise InputError(bundle, f"not a bundle: a folder with context.yaml, or a {' or '.join(ARCHIVE_SUFFIXES)} "
                                 f"archive of one")
    if not is_archive(bundle):
        yield bundle
        return
    from attribution.scope.archive import ArchiveLimits, unpack

    with tempfile.TemporaryDirectory(prefix="attribution-bundle-") as tmp:
        dest = Path(tmp) / "bundle"
        dest.mkdir()
        try:
            with open(bundle, "rb") as f:
                root = unpack(f, dest, ArchiveLimits())
            yield root
        except InputError as exc:
            raise in_archive(exc, bundle, dest) from None


def in_archive(exc, archive: Path, dest: Path):
    """`exc` (an InputError) said of `archive`, which was unpacked into `dest`: the member is named as the archive
    lists it (`bundle/context.yaml:15`), the archive's own problems by the archive."""
    from attribution.errors import InputError
    from attribution.scope.archive import ARCHIVE

    message = exc.message.replace(str(dest) + "/", "").replace(str(dest), ".")
    path = Path(exc.path)
    if exc.path == ARCHIVE:
        return InputError(str(archive), message)
    if path.is_absolute():
        try:
            member = str(path.relative_to(dest))
        except ValueError:
            return InputError(exc.path, message, exc.line)
    else:
        member = exc.path  # named from the bundle's top (scope.archive's context.yaml checks)
    return InputError(str(archive), f"{member}{f':{exc.line}' if exc.line else ''}: {message}")


__all__ = ["ARCHIVE_SUFFIXES", "NOT_A_BUNDLE", "bundle_paths", "in_archive", "is_archive", "opened"]
