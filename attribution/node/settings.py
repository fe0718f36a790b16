"""The few settings the node agent reads, kept as JSON in its cache so that a hook run parses no YAML.

On a cache miss (no entry, or the configuration file, an environment override or the user changed) the full
configuration is loaded once through attribution.config (YAML, validation and all) and the node's part of it
written to ``<cache>/settings-<key>.json``. The key hashes the configuration files that load_settings may read
(their bytes), the variables that override them and the user, so an edit takes effect on the next run.

The cache folder: ``$ATTRIBUTION_CACHE_DIR``, else ``$ATTRIBUTION_HOME/cache``, else ``/var/cache/attribution``
for root and ``$XDG_CACHE_HOME/attribution`` (``~/.cache/attribution``) for others. Entries are trusted only
when this user owns them and their folder and neither is writable by group or others.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from attribution.frozen import Value, replace, field

__all__ = ["NodeSettings", "cache_dir", "node_settings"]

#: environment variables load_settings reads (directly or to find files and defaults)
_ENV = ("ATTRIBUTION_CONFIG", "ATTRIBUTION_DATABASE_URL", "ATTRIBUTION_HOME", "HOME", "XDG_CONFIG_HOME",
        "XDG_DATA_HOME")
#: configuration files load_settings looks at when no path is given (config.SYSTEM_CONFIG, config.user_config())
_SYSTEM_CONFIG = "/etc/attribution/config.yaml"
_FORMAT = "5"  # 3: database idle_in_transaction_timeout_ms and tcp_timeout_seconds, epilog job_output_bytes; 4: node_log_bytes;
#: 5: database delivery


class NodeSettings(Value):
    """What node/epilog.py reads of attribution.config.Settings, under the same names."""

    home: Path
    spool: Path
    epilog: Any  # the epilog section's values as attributes (budget_seconds, kernel_source, ...)
    service: Any  # client_timeout_seconds
    database: Any  # the database section's values (url, password_file, timeouts): the password is read when used
    cluster: str | None = None
    service_url: str | None = None
    service_token_file: str | None = None
    rules_dir: Path | None = None
    source: str | None = None
    config_path: str | None = None  # the --config given, for loading the full settings when needed
    extra: dict = field(default_factory=dict)

    def with_epilog(self, **changes) -> NodeSettings:
        return self._with("epilog", changes)

    def with_database(self, **changes) -> NodeSettings:
        return self._with("database", changes)

    def _with(self, section: str, changes: dict) -> NodeSettings:
        return replace(self, **{section: SimpleNamespace(**{**vars(getattr(self, section)),
                                                                            **changes})})

    def to_json(self) -> dict:
        return {"home": str(self.home), "spool": str(self.spool), "epilog": vars(self.epilog),
                "service": vars(self.service), "database": vars(self.database), "cluster": self.cluster, "service_url": self.service_url,
                "service_token_file": self.service_token_file,
                "rules_dir": str(self.rules_dir) if self.rules_dir else None, "source": self.source}

    @classmethod
    def from_json(cls, d: dict, config_path: str | None) -> NodeSettings:
        return cls(home=Path(d["home"]), spool=Path(d["spool"]), epilog=SimpleNamespace(**d["epilog"]),
                   service=SimpleNamespace(**d["service"]), database=SimpleNamespace(**d["database"]), cluster=d.get("cluster"),
                   service_url=d.get("service_url"), service_token_file=d.get("service_token_file"),
                   rules_dir=Path(d["rules_dir"]) if d.get("rules_dir") else None,
                   source=d.get("source"), config_path=config_path)

    @classmethod
    def from_settings(cls, s, config_path: str | None) -> NodeSettings:
        """The node's part of a full attribution.config.Settings."""
        return cls.from_json({
            "home": str(s.home), "spool": str(s.spool), "epilog": _values(s.epilog),
            "service": {"client_timeout_seconds": s.service.client_timeout_seconds},
            "database": _values(s.database), "cluster": s.cluster,
            "service_url": s.service_url, "service_token_file": s.service_token_file,
            "rules_dir": str(s.rules_dir) if s.rules_dir else None, "source": s.source}, config_path)


def _values(section) -> dict:
    import dataclasses

    if dataclasses.is_dataclass(section):
        return dataclasses.asdict(section)
    dump = getattr(section, "model_dump", None)  # a pydantic model
    return dict(dump()) if dump else dict(vars(section))


def cache_dir() -> Path:
    """Where the node agent keeps its compiled rule pack and settings (see the module doc)."""
    env = os.environ.get("ATTRIBUTION_CACHE_DIR")
    if env:
        return Path(env)
    home = os.environ.get("ATTRIBUTION_HOME")
    if home:
        return Path(home) / "cache"
    if os.geteuid() == 0:
        return Path("/var/cache/attribution")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attribution"


def _key(config_path: str | None) -> str:
    h = hashlib.sha256(f"{_FORMAT}\0{os.geteuid()}\0{config_path}\0".encode())
    for name in _ENV:
        h.update(f"{name}={os.environ.get(name)}\0".encode())
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    for p in (config_path, os.environ.get("ATTRIBUTION_CONFIG"), _SYSTEM_CONFIG,
              os.path.join(xdg, "attribution", "config.yaml")):
        if not p:
            continue
        try:
            data = Path(p).read_bytes()
        except OSError as exc:
            data = f"unreadable:{exc.errno}".encode()
        h.update(p.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:32]


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def node_settings(config_path: str | Path | None = None, cache: Path | None = None) -> NodeSettings:
    """The node's settings: from the cache when nothing they depend on changed, else loaded in full (raises
    ConfigError as load_settings does) and cached."""
    config_path = str(config_path) if config_path else None
    cache = cache or cache_dir()
    path = cache / f"settings-{_key(config_path)}.json"
    try:
        if _trusted(os.stat(path)) and _trusted(os.stat(cache)):
            return NodeSettings.from_json(json.loads(path.read_text()), config_path)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from attribution.config import load_settings

    ns = NodeSettings.from_settings(load_settings(config_path), config_path)
    try:
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        if _trusted(os.stat(cache)):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(ns.to_json(), f)
            os.replace(tmp, path)
            for old in cache.glob("settings-*.json"):
                if old != path:
                    old.unlink(missing_ok=True)
    except OSError:
        pass
    return ns
