"""Constants and small values shared by the embedded server's modules."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any


log = logging.getLogger("attribution.store.embedded")

#: OS users tried, in this order, when running as root and the cluster has no owner yet.
ROOT_USER_CANDIDATES: tuple[str, ...] = ("attribution-pg", "pgserver", "postgres")
#: The OS user created with useradd when none of the candidates exists.
DEFAULT_OS_USER = "attribution-pg"
#: The database superuser made by initdb (not an OS user).
SUPERUSER = "postgres"
#: Port number in the socket file name when the server listens on a unix socket only.
SOCKET_ONLY_PORT = 5432

_CONF_MARK = "# --- attribution embedded settings ---"
_RUNTIME_CONF = "attribution.runtime.conf"
_LOG_NAME = "server.log"
# sun_path is 108 bytes on Linux (104 on macOS) including the final NUL.
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class _OsUser:
    name: str
    uid: int
    gid: int
    home: str
    groups: tuple[int, ...]  # every group id it is in (as initgroups would set)

    @classmethod
    def from_pwd(cls, pw: Any) -> _OsUser:
        try:
            groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except OSError:
            groups = (pw.pw_gid,)
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, groups)


@dataclass(frozen=True)
class _Result:
    returncode: int
    output: str


@dataclass(frozen=True)
class _PidFile:
    pid: int
    data_dir: str
    port: int | None
    socket_dir: str | None
    listen: str | None
    status: str | None

