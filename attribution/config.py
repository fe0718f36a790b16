"""Settings: the configuration file, environment overrides, and credentials read from root-only files.

Looked up in this order: `--config` / `$ATTRIBUTION_CONFIG`, `/etc/attribution/config.yaml`,
`~/.config/attribution/config.yaml`. Without any file every setting has a default. A database password is never
in the file or on a command line: it comes from `database.password_file`, which must not be readable by
group or others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

SYSTEM_CONFIG = Path("/etc/attribution/config.yaml")


def user_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "attribution" / "config.yaml"


def default_home() -> Path:
    """Where the embedded database and the spool live when nothing is configured."""
    env = os.environ.get("ATTRIBUTION_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/attribution")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "attribution"


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None = None
    password_file: str | None = None
    connect_timeout: float = 5.0
    statement_timeout_ms: int = 30000
    lock_timeout_ms: int = 10000
    pool_size: int = 2


@dataclass(frozen=True)
class EpilogSettings:
    budget_seconds: float = 20.0
    kernel_source: str = "auto"  # auto | journald | dmesg | file
    kernel_file: str | None = None  # used when kernel_source is file (e.g. /var/log/kern.log)
    fabricmanager_log: str = "/var/log/fabricmanager.log"
    lookback_seconds: int = 86400  # when neither Slurm nor the prolog says when the job started
    state_dir: str | None = None  # prolog start stamps; default <home>/state
    job_output: bool = True  # the controller hook reads the job's stdout/stderr


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=default_home)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    epilog: EpilogSettings = field(default_factory=EpilogSettings)
    spool_dir: Path | None = None
    rules_dir: Path | None = None
    cluster: str | None = None
    service_url: str | None = None
    service_token_file: str | None = None
    source: str | None = None  # the file these settings came from

    @property
    def spool(self) -> Path:
        return self.spool_dir or self.home / "spool"

    @property
    def embedded_dir(self) -> Path:
        return self.home / "pg"


def _section(data: dict, name: str, origin: str) -> dict:
    v = data.get(name) or {}
    if not isinstance(v, dict):
        raise ConfigError(f"{origin}: '{name}' must be a mapping")
    return v


def _build(cls, values: dict, origin: str, section: str):
    known = {f for f in cls.__dataclass_fields__}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{origin}: unknown setting(s) in '{section}': {', '.join(unknown)}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"{origin}: {section}: {exc}") from None


def parse_settings(data: Any, origin: str) -> Settings:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping")
    top = {"home", "database", "epilog", "spool_dir", "rules_dir", "cluster", "service_url", "service_token_file"}
    unknown = sorted(set(data) - top)
    if unknown:
        raise ConfigError(f"{origin}: unknown setting(s): {', '.join(unknown)}")
    s = Settings(source=origin)
    if data.get("home"):
        s = replace(s, home=Path(data["home"]))
    s = replace(s, database=_build(DatabaseSettings, _section(data, "database", origin), origin, "database"),
                epilog=_build(EpilogSettings, _section(data, "epilog", origin), origin, "epilog"))
    for key in ("spool_dir", "rules_dir"):
        if data.get(key):
            s = replace(s, **{key: Path(data[key])})
    for key in ("cluster", "service_url", "service_token_file"):
        if data.get(key) is not None:
            s = replace(s, **{key: str(data[key])})
    return s


def load_settings(path: str | Path | None = None) -> Settings:
    """Settings from the given file, or the first existing default file, with environment overrides."""
    candidates = [Path(path)] if path else []
    env = os.environ.get("ATTRIBUTION_CONFIG")
    if not path and env:
        candidates = [Path(env)]
    if not candidates:
        candidates = [SYSTEM_CONFIG, user_config()]
    settings = Settings()
    for p in candidates:
        if p.is_file():
            try:
                text = p.read_text()
            except OSError as exc:
                raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"{p}:{mark.line + 1}" if mark else str(p)
                raise ConfigError(f"{where}: malformed YAML") from None
            settings = parse_settings(data, str(p))
            break
        if path or env:
            raise ConfigError(f"{p}: no such configuration file")
    url = os.environ.get("ATTRIBUTION_DATABASE_URL")
    if url:
        settings = replace(settings, database=replace(settings.database, url=url))
    home = os.environ.get("ATTRIBUTION_HOME")
    if home:
        settings = replace(settings, home=Path(home))
    return settings


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
