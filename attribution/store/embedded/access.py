"""The embedded server as root: the OS user it runs as, and what that user must be able to reach."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from attribution.errors import StoreError
from attribution.store.embedded._common import (DEFAULT_OS_USER, ROOT_USER_CANDIDATES, _OsUser, log)
from attribution.store.embedded.binaries import wheel_libs, warn_if_network_fs


class AccessMixin:
    """EmbeddedPostgres's OS user and permission checks (see the package doc, Running as root)."""

    def _get_os_user(self) -> _OsUser | None:
        """The OS user the server runs as when we are root; None when not root (run as ourselves)."""
        if os.geteuid() != 0:
            return None
        if self._os_user is not None:
            return self._os_user
        import pwd

        def entry(name: str) -> _OsUser | None:
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                return None
            return _OsUser.from_pwd(pw)

        chosen: _OsUser | None = None
        if self._requested_os_user:
            chosen = entry(self._requested_os_user)
            if chosen is None:
                raise StoreError(f"OS user {self._requested_os_user!r} for the embedded database does not exist")
        elif self.initialized():
            owner = self.data_dir.stat().st_uid
            if owner != 0:
                try:
                    chosen = _OsUser.from_pwd(pwd.getpwuid(owner))
                except KeyError:
                    raise StoreError(
                        f"{self.data_dir}: owned by uid {owner}, which has no passwd entry; cannot run its server"
                    ) from None
        if chosen is None:
            for name in ROOT_USER_CANDIDATES:
                chosen = entry(name)
                if chosen is not None:
                    break
        if chosen is None:
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            proc = subprocess.run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    DEFAULT_OS_USER,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            chosen = entry(DEFAULT_OS_USER)  # also covers a concurrent useradd that won the race
            if chosen is None:
                raise StoreError(
                    f"running as root, the embedded PostgreSQL needs an unprivileged OS user, and "
                    f"'useradd {DEFAULT_OS_USER}' failed: {(proc.stderr or proc.stdout).strip()}"
                )
            log.info("created OS user %s for the embedded PostgreSQL", DEFAULT_OS_USER)
        if chosen.uid == 0:
            raise StoreError(f"OS user {chosen.name!r} is root; the embedded PostgreSQL needs an unprivileged one")
        self._os_user = chosen
        return chosen

    def _prepare(self) -> None:
        """As root: let the server's user reach data_dir and the binaries (see the module doc)."""
        if self._prepared:
            return
        user = self._get_os_user()
        parent = self.data_dir.parent
        self._created.update(p for p in [parent, *parent.parents] if not p.exists())
        parent.mkdir(parents=True, exist_ok=True)
        warn_if_network_fs(self.data_dir)
        if user is not None:
            self._ensure_searchable_ancestors(self.data_dir, user)
            install_root = self.bin_dir.parent
            self._ensure_searchable_ancestors(install_root, user)
            self._ensure_tree_readable(install_root)
            libs = wheel_libs(self.bin_dir)
            if libs is not None:
                self._ensure_tree_readable(libs)
        self._prepared = True

    def _user_can_search(self, st: os.stat_result, user: _OsUser) -> bool:
        if st.st_mode & stat.S_IXOTH:
            return True
        if st.st_uid == user.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        return bool(st.st_mode & stat.S_IXGRP) and st.st_gid in user.groups

    def _chmod(self, path: Path, new_mode: int, old_mode: int) -> None:
        os.chmod(path, new_mode)
        self._note(f"chmod o+x {path} ({old_mode:04o} -> {new_mode:04o})")

    def _note(self, change: str) -> None:
        self.chmodded.append(change)
        log.info("%s, for the embedded PostgreSQL's OS user", change)

    def _ensure_searchable_ancestors(self, path: Path, user: _OsUser) -> None:
        """Make sure ``user`` can search every ancestor of ``path``: chmod o+x the ones this object created,
        refuse (StoreError naming the directory) for any other: it never changes a directory it does not own."""
        for ancestor in reversed(path.parents):
            st = ancestor.stat()
            if self._user_can_search(st, user):
                continue
            mode = stat.S_IMODE(st.st_mode)
            if ancestor in self._created:
                self._chmod(ancestor, mode | stat.S_IXOTH, mode)
                continue
            raise StoreError(
                f"{ancestor}: the embedded PostgreSQL runs as the OS user {user.name}, who cannot enter this "
                f"directory (mode {mode:04o}); attribution does not change the permissions of directories it did "
                f"not create: put its home on a path {user.name} can reach (e.g. ATTRIBUTION_HOME=/var/lib/attribution)"
                f" or run: chmod o+x {ancestor}")

    def _ensure_tree_readable(self, root: Path) -> None:
        """Refuse a PostgreSQL install tree the server's user cannot read (a venv made under umask 077)."""
        probes = [root, *root.iterdir()]
        if root == self.bin_dir.parent:
            probes += [self.bin_dir / "postgres", self.bin_dir / "initdb", self.bin_dir / "pg_ctl"]
        for probe in probes:
            mode = probe.stat().st_mode
            want = stat.S_IROTH | stat.S_IXOTH if (probe.is_dir() or mode & stat.S_IXUSR) else stat.S_IROTH
            if mode & want != want:
                raise StoreError(
                    f"{probe}: the PostgreSQL binaries are not readable by other users (installed under umask 077?) "
                    f"and the embedded server cannot run as root: run chmod -R o+rX {root}, or reinstall with "
                    f"umask 022")

    def _prepare_socket_dir(self) -> None:
        sock = self.socket_dir
        if sock == self.data_dir:
            return
        user = self._get_os_user()
        owner_uid = user.uid if user is not None else os.geteuid()
        try:
            sock.mkdir(mode=0o700)
            if user is not None:
                os.chown(sock, user.uid, user.gid)
        except FileExistsError:
            pass
        st = os.lstat(sock)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner_uid or stat.S_IMODE(st.st_mode) & 0o077:
            raise StoreError(
                f"{sock}: socket directory exists but is not a private (0700) directory of uid {owner_uid}"
            )
        if user is not None:
            self._ensure_searchable_ancestors(sock, user)

    # ------------------------------------------------------------------ internals: running binaries

