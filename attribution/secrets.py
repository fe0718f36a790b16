"""Credentials read from files that only their owner may read (a database password, a service token)."""

from __future__ import annotations

import stat
from pathlib import Path

from attribution.errors import ConfigError

__all__ = ["read_secret"]


def read_secret(path: str | Path) -> str:
    """A credential from a file that only its owner may read; anything else is refused."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"{p}: credentials file does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read credentials file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{p}: credentials file is not a regular file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{p}: credentials file is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                          f"run: chmod 600 {p}")
    try:
        return p.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read credentials file: {exc.strerror or exc}") from None
