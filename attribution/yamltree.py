"""YAML read with its node tree, so that every later problem can name the line of the key it is about (the rule
pack's files, the configuration file). PyYAML only: no schema validator."""

from __future__ import annotations

from typing import Any

import yaml

#: libyaml's parser when PyYAML was built with it (the wheels are): ~10x faster.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_with_tree(text: str) -> tuple[Any, Any]:
    """The data and the node tree of one YAML document; raises yaml.YAMLError."""
    return yaml.load(text, Loader=SAFE_LOADER), yaml.compose(text, Loader=SAFE_LOADER)


def line_of(tree, path: list) -> int:
    """1-based line of the YAML node at `path` (keys and indexes), or of its nearest existing parent."""
    node = tree
    line = (tree.start_mark.line + 1) if tree is not None else 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                return line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


__all__ = ["SAFE_LOADER", "load_with_tree", "line_of"]
