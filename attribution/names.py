"""The names the store keeps: one rule, checked at every intake (a bundle's context.yaml, the service's bodies
and paths, the observation codec, the connectors) and by the dashboard's routes. Pure.

A cluster or node name is what Slurm (slurm.conf ClusterName and NodeName, SLURMD_NODENAME) or Kubernetes (a
node's metadata.name) calls a machine: 1 to MAX_NAME printable characters, none of them whitespace, `/` (a node
name is a folder of a bundle, `nodes/<node>/`, and the store keys a job's own output lines `<cluster>/<job id>`,
which must be no node's name: docs/store.md) or one of `[`, `]` and `,` (Slurm's hostlist syntax of
`gpu[001-004],gpu010`: a name holding them could not be told from a list of names, and `scontrol update
NodeName=` would read it as one), and not `.` or `..`. Quotes, `$(...)`, `;`, `#`, `?`, `%`, `:` and letters of
any script are kept as they are (docs/security.md "Untrusted text": no name reaches a shell).

A job id, user or partition is text: 1 to MAX_NAME characters PostgreSQL can store (no NUL, no lone surrogate).
A Kueue workload's id is `namespace/name`: pages put names into URLs as percent-encoded path segments
(attribution.web.urls) and the service's routes take them back whole, a `/` inside included
(attribution.api.segments).
"""

from __future__ import annotations

from attribution.errors import InputError

#: The longest name accepted: a DNS name is at most 253 characters (Linux host names at most 64); longer is not a
#: name, and would not fit the store's btree indexes.
MAX_NAME = 255
#: Slurm's hostlist syntax: no cluster or node name holds it.
HOSTLIST_CHARACTERS = frozenset("[],")
#: Names that are no folder's.
DOT_NAMES = frozenset({".", ".."})


def text_problem(value: str) -> str | None:
    """Why `value` is not storable name text (a job id, a user), or None when it is."""
    if not value:
        return "an empty name"
    if len(value) > MAX_NAME:
        return f"a name of {len(value)} characters (at most {MAX_NAME})"
    if "\x00" in value:
        return "a NUL character (not storable text)"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return "a lone surrogate (not storable text)"
    return None


def system_name_problem(value: str) -> str | None:
    """Why `value` is not a cluster or node name, or None when it is."""
    import re

    # the names nearly every system has (letters, digits, `.`, `_`, `-`) in one C call: a job's context names
    # hundreds of nodes, checked at every report of it
    if re.fullmatch(r"[A-Za-z0-9._-]{1,%d}" % MAX_NAME, value) and value not in DOT_NAMES:
        return None
    problem = text_problem(value)
    if problem is not None:
        return problem
    if value in DOT_NAMES:
        return f"{value!r} is no machine's name"
    for c in value:
        if c in HOSTLIST_CHARACTERS:
            return f"{c!r} in a name (Slurm's hostlist syntax)"
        if c == "/":
            return "'/' in a name (a node name is a bundle's folder; the store's job keys are <cluster>/<job id>)"
        if c.isspace() or not c.isprintable():
            return f"the character U+{ord(c):04X} in a name (whitespace or not printable)"
    return None


def check_text(value, field: str, origin: str) -> None:
    """InputError when a job id, user or partition (None or empty: absent) is not storable name text."""
    if value is not None and value != "":
        problem = text_problem(str(value))
        if problem is not None:
            raise InputError(origin, f"{field}: {problem}")


def check_system_name(value, field: str, origin: str) -> None:
    """InputError when a cluster or node name (None or empty: absent) breaks the rule."""
    if value is not None and value != "":
        problem = system_name_problem(str(value))
        if problem is not None:
            raise InputError(origin, f"{field}: {problem}")


def text_name(value: str) -> str:
    """`value` when it is storable name text; ValueError otherwise (for pydantic's validators)."""
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def system_name(value: str) -> str:
    """`value` when it is a cluster or node name; ValueError otherwise (for pydantic's validators)."""
    problem = system_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value
