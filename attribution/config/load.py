"""Reading the configuration file: YAML with line numbers, validated in one pass against `config.sections`, every
problem as `file:line: setting problem` (`Problem`), then the environment overrides.

Looked up in this order: `--config` / `$ATTRIBUTION_CONFIG`, `/etc/attribution/config.yaml`,
`~/.config/attribution/config.yaml`. Without any file every setting has a default.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from pydantic import TypeAdapter, ValidationError

from attribution.config.sections import ConnectorSettings, Settings
from attribution.errors import ConfigError, Problem

SYSTEM_CONFIG = Path("/etc/attribution/config.yaml")
#: pydantic's error types that mean "a key this section does not have"
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
#: pydantic's wording of a wrong type, in the words the rest of the messages use
_WRONG_TYPE = {"dataclass_type": "must be a mapping", "dict_type": "must be a mapping", "model_type": "must be a mapping",
               "model_attributes_type": "must be a mapping", "tuple_type": "must be a list",
               "string_type": "must be text", "missing": "is required", "path_type": "must be a path"}


def user_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "attribution" / "config.yaml"


def _dotted(loc: Sequence[Union[str, int]]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problems_of(exc: ValidationError, origin: str, tree: Any = None, prefix: tuple = ()) -> list[Problem]:
    """Each validation error as a Problem naming the file, the line of the offending key (when the YAML tree is
    known) and, in one line, the setting and what is wrong with it."""
    from attribution.yamltree import line_of

    problems = []
    for e in exc.errors():
        loc = prefix + tuple(p for p in e["loc"] if p != "[key]")
        line = line_of(tree, list(loc)) if tree is not None else None
        if e["type"] in _UNKNOWN and loc:
            parent = _dotted(loc[:-1])
            message = (f"unknown setting(s) in '{parent}': {loc[-1]}" if parent
                       else f"unknown setting(s): {loc[-1]}")
        else:
            what = e["msg"]
            if e["type"] == "value_error":
                what = str(e.get("ctx", {}).get("error", what))
            what = _WRONG_TYPE.get(e["type"], what)
            name = _dotted(loc)
            message = (f"{name} {what}" if what.startswith(("must ", "is ")) else f"{name}: {what}") if name \
                else what
        problems.append(Problem(origin, line, message))
    return problems


def _raise(problems: list[Problem]):
    raise ConfigError("\n".join(map(str, problems)), problems) from None


def parse_settings(data: Any, origin: str, tree: Any = None) -> Settings:
    """Settings from one parsed file (`tree`, its YAML node tree, gives the problems their lines)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        _raise([Problem(origin, 1 if tree is not None else None, "expected a mapping")])
    if "source" in data:  # set from where the settings were read, never by the file
        from attribution.yamltree import line_of

        _raise([Problem(origin, line_of(tree, ["source"]) if tree is not None else None,
                        "unknown setting(s): source")])
    try:
        return TypeAdapter(Settings).validate_python({**data, "source": origin})
    except ValidationError as exc:
        _raise(problems_of(exc, origin, tree))


def parse_connectors(data: Any, origin: str) -> ConnectorSettings:
    """The `connectors:` section alone, given as data (a file is read whole by `read_file`)."""
    try:
        return TypeAdapter(ConnectorSettings).validate_python(data)
    except ValidationError as exc:
        _raise(problems_of(exc, origin, prefix=("connectors",)))


def read_file(p: Path) -> Settings:
    from attribution.yamltree import load_with_tree
    import yaml

    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}:1: not UTF-8 text") from None
    try:
        data, tree = load_with_tree(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise ConfigError(f"{where}: malformed YAML: {getattr(exc, 'problem', None) or 'cannot parse'}") from None
    return parse_settings(data, str(p), tree)


def load_settings(path: Optional[Union[str, Path]] = None) -> Settings:
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
            settings = read_file(p)
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


__all__ = ["SYSTEM_CONFIG", "user_config", "problems_of", "parse_settings", "parse_connectors", "read_file",
           "load_settings"]
