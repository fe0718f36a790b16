"""Running the node agent on Python 3.9 (RHEL 9's): the one 3.10 feature its modules use at run time.

The value classes the node loads are `attribution.frozen.Value`s, slotted on every Python. The central side's few
`@dataclass(frozen=True, slots=True)` classes (less memory per instance on 3.10+) may still be imported by a node
that loads the YAML pack or the configuration (a cache miss); Python 3.9's dataclass has no `slots` option, so on
3.9 `enable()` makes `dataclasses.dataclass` ignore it before the engine is imported: the classes behave the same,
with a per-instance `__dict__`. Only the node agent calls it (the central
side needs 3.11, attribution/entry.py); on 3.10 and later it does nothing. tests/test_node_pythons.py runs the node
agent on every interpreter present.
"""

from __future__ import annotations

import sys

__all__ = ["enable"]


def enable() -> None:
    if sys.version_info >= (3, 10):
        return
    import dataclasses

    if getattr(dataclasses.dataclass, "_attribution_compat", False):
        return
    original = dataclasses.dataclass

    def dataclass(cls=None, /, **kwargs):
        kwargs.pop("slots", None)
        return original(cls, **kwargs) if cls is not None else original(**kwargs)

    dataclass._attribution_compat = True  # type: ignore[attr-defined]
    dataclasses.dataclass = dataclass
