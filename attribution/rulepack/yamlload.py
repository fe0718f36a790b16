"""Reading a rule pack's files: YAML with line numbers, each document validated against its type's schema.

The result is the pack's digest (its version) and its documents by type, each with the YAML node tree that
gives line numbers to every later problem. Problems are values (`Problem(path, line, message)`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from attribution.errors import Problem
from attribution.yamltree import line_of, load_with_tree

SCHEMA_DIR_NAME = "schema"
#: The `type:` of each file the engine understands, and its schema file.
FILE_TYPES = {
    "rules": "rules.schema.json",
    "kinds": "kinds.schema.json",
    "catalog": "catalog.schema.json",
    "causal_graph": "causal_graph.schema.json",
    "job_states": "job_states.schema.json",
    "drain_policy": "drain_policy.schema.json",
    "requeue_policy": "requeue_policy.schema.json",
    "metric_rules": "metric_rules.schema.json",
    "counter_rules": "counter_rules.schema.json",
    "redactions": "redactions.schema.json",
}
#: The vocabularies (actions, outcomes, roles...) every schema refers to: `urn:attribution:defs#/$defs/...`.
DEFS_SCHEMA = "defs.schema.json"



@dataclass(frozen=True)
class Document:
    """One validated file of the pack: where it is shown from, its data, and its YAML node tree (for lines)."""

    shown: str
    data: Any
    tree: Any

    def line(self, path: list) -> int:
        return line_of(self.tree, path)

    def problem(self, path: list, message: str) -> Problem:
        return Problem(self.shown, self.line(path), message)


def pack_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.yaml") if SCHEMA_DIR_NAME not in p.relative_to(root).parts)


def read_pack(root: Path, fallback_schemas: Path, problems: list[Problem]) -> tuple[str, dict[str, list[Document]]]:
    """The pack's digest and its schema-valid documents by type; every problem found is appended."""
    validators = _validators(root / SCHEMA_DIR_NAME, fallback_schemas, problems)
    digest = hashlib.sha256()
    docs: dict[str, list[Document]] = {}
    for path in pack_files(root):
        rel = path.relative_to(root).as_posix()
        raw = path.read_bytes()
        digest.update(rel.encode() + b"\0" + raw + b"\0")
        shown = str(path)
        try:
            text = raw.decode("utf-8")
            data, tree = load_with_tree(text)  # the node tree: line numbers for problems
        except UnicodeDecodeError:
            problems.append(Problem(shown, 1, "not UTF-8 text"))
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problems.append(Problem(shown, mark.line + 1 if mark else 1,
                                    f"malformed YAML: {getattr(exc, 'problem', exc)}"))
            continue
        if not isinstance(data, dict) or "type" not in data:
            problems.append(Problem(shown, 1, f"expected a mapping with a 'type' key ({', '.join(FILE_TYPES)})"))
            continue
        ftype = data["type"]
        if ftype not in FILE_TYPES:
            problems.append(Problem(shown, line_of(tree, ["type"]), f"unknown type {ftype!r}"))
            continue
        validator = validators.get(ftype)
        if validator is not None:
            errs = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
            if errs:
                for e in errs:
                    at = "/".join(map(str, e.absolute_path)) or "(top)"
                    problems.append(Problem(shown, line_of(tree, list(e.absolute_path)), f"{at}: {_short(e.message)}"))
                continue
        docs.setdefault(ftype, []).append(Document(shown, data, tree))
    return digest.hexdigest(), docs


def _short(msg: str) -> str:
    return msg if len(msg) < 300 else msg[:297] + "..."


def _validators(sdir: Path, fallback: Path, problems: list[Problem]) -> dict[str, Any]:
    """A validator per file type; the pack's own schema files first, else the shipped ones; one shared registry."""
    schemas: dict[str, Any] = {}
    for key, name in {**FILE_TYPES, "_defs": DEFS_SCHEMA}.items():
        p = sdir / name if (sdir / name).is_file() else fallback / name
        if not p.is_file():
            continue
        try:
            schemas[key] = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            problems.append(Problem(str(p), 1, f"unreadable schema: {exc}"))
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in schemas.values() if isinstance(s, dict) and "$id" in s)
    return {t: jsonschema.Draft202012Validator(s, registry=registry) for t, s in schemas.items() if t in FILE_TYPES}
