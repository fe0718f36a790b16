"""The embedded cluster's files: initdb, its configuration, the postmaster.pid, the server log."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from attribution.errors import StoreError
from attribution.store.embedded._common import (SUPERUSER, _CONF_MARK, _PidFile, _RUNTIME_CONF, log)


class FilesMixin:
    """EmbeddedPostgres's cluster files and the server's readiness (see the package doc)."""

    def _initdb(self, target: Path) -> None:
        base = [
            "initdb",
            "-D",
            str(target),
            "-U",
            SUPERUSER,
            "--auth-local=trust",
            "--auth-host=trust",
            "--encoding=UTF8",
            "--no-sync",
            "--no-instructions",
        ]
        result = self._run_pg([*base, "--locale=C.UTF-8"], check=False)
        if result.returncode != 0 and "locale" in result.output.lower():
            # No C.UTF-8 locale on this system: plain C (byte order) with UTF8 encoding works everywhere.
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            result = self._run_pg([*base, "--no-locale"], check=False)
        if result.returncode != 0:
            raise StoreError(f"initdb failed for the embedded PostgreSQL in {self.data_dir}: {result.output.strip()}")

    def _listen_settings(self) -> dict[str, str]:
        return {
            "listen_addresses": "127.0.0.1" if self.port is not None else "",
            "port": str(self.socket_port),
            "unix_socket_directories": str(self.socket_dir),
        }

    def _fast_settings(self) -> dict[str, str]:
        value = "off" if self.fast else "on"
        return {"fsync": value, "synchronous_commit": value, "full_page_writes": value}

    @staticmethod
    def _conf_lines(settings: dict[str, str]) -> list[str]:
        return [f"{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in settings.items()]

    def _write_static_conf(self, target: Path) -> None:
        """Append our settings to postgresql.conf; instance-specific ones are repeated in the runtime include."""
        static = {
            "max_connections": "200",
            "unix_socket_permissions": "0700",
            "logging_collector": "off",
            "log_line_prefix": "%m [%p] ",
            "log_timezone": "UTC",
            **self._listen_settings(),
            **self._fast_settings(),
        }
        lines = [
            "",
            _CONF_MARK,
            *self._conf_lines(static),
            "# written by every start() from the EmbeddedPostgres settings (port, socket dir, fast):",
            f"include_if_exists = '{_RUNTIME_CONF}'",
            "",
        ]
        with open(target / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines))

    def _write_runtime_conf(self, target: Path) -> None:
        text = "\n".join(
            [
                "# managed by attribution.store.embedded; rewritten at every start",
                *self._conf_lines({**self._listen_settings(), **self._fast_settings()}),
                "",
            ]
        )
        path = target / _RUNTIME_CONF
        try:
            if path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        tmp = target / f".{_RUNTIME_CONF}.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        user = self._get_os_user()
        if user is not None:
            os.chown(tmp, user.uid, user.gid)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ internals: postmaster.pid and the log

    def _read_pidfile(self) -> _PidFile | None:
        try:
            lines = (self.data_dir / "postmaster.pid").read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.data_dir}/postmaster.pid: cannot read: {exc}") from exc
        if not lines or not lines[0].strip().lstrip("-").isdigit():
            return None

        def line(i: int) -> str | None:
            return lines[i].strip() if len(lines) > i and lines[i].strip() else None

        port = line(3)
        return _PidFile(
            pid=abs(int(lines[0].strip())),
            data_dir=line(1) or "",
            port=int(port) if port and port.isdigit() else None,
            socket_dir=line(4),
            listen=line(5),
            status=line(7),
        )

    def _is_our_postmaster(self, pid: int) -> bool:
        """pid is alive, not a zombie, and (where /proc exists) a postgres started on this data dir."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        proc = Path(f"/proc/{pid}")
        if not Path("/proc/self").exists():
            return True
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = re.search(rb"^State:\s*(\S)", (proc / "status").read_bytes(), re.M)
        except OSError:
            return False
        if not cmdline or not cmdline[0] or (state and state.group(1) in (b"Z", b"X")):
            return False
        if not os.path.basename(cmdline[0]).startswith(b"postgres"):
            return False
        target = os.fsencode(str(self.data_dir))
        args = [a.rstrip(b"/") for a in cmdline]
        return target in args

    def _remove_stale_pidfile(self) -> None:
        info = self._read_pidfile()
        path = self.data_dir / "postmaster.pid"
        if info is None:
            if path.exists() and path.stat().st_size == 0:
                path.unlink(missing_ok=True)  # empty file left by a crash during startup
            return
        if not self._is_our_postmaster(info.pid):
            log.info("removing stale %s (pid %s is not running)", path, info.pid)
            path.unlink(missing_ok=True)

    def _remove_stale_socket_lock(self) -> None:
        """Remove ``.s.PGSQL.<port>.lock`` left by a killed postmaster.

        postgres itself treats the lock as stale only when its pid is gone; a killed postmaster that its new parent
        has not reaped yet (a zombie) still passes that test and would block the start.
        """
        path = self.socket_dir / f".s.PGSQL.{self.socket_port}.lock"
        try:
            first = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
        except FileNotFoundError:
            return
        pid = abs(int(first)) if first.lstrip("-").isdigit() else None
        if pid is None or not self._is_our_postmaster(pid):
            log.info("removing stale %s (pid %s is not running)", path, pid)
            path.unlink(missing_ok=True)

    def _wait_ready(self, deadline: float) -> None:
        while True:
            info = self._read_pidfile()
            alive = info is not None and self._is_our_postmaster(info.pid)
            if alive and info is not None and info.status in ("ready", "standby"):
                return
            if not alive:
                raise StoreError(
                    f"the embedded PostgreSQL in {self.data_dir} is not running\n"
                    f"last lines of {self.log_path}:\n{self._tail(self._read_log(0))}"
                )
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"the embedded PostgreSQL in {self.data_dir} did not become ready in time "
                    f"(status {info.status if info else None!r})\n"
                    f"last lines of {self.log_path}:\n{self._tail(self._read_log(0))}"
                )
            time.sleep(0.05)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read_log(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    @staticmethod
    def _tail(text: str, lines: int = 15) -> str:
        tail = text.strip().splitlines()[-lines:]
        return "\n".join(f"  {line}" for line in tail) if tail else "  (empty)"

