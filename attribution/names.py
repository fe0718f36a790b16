"""The names the store keeps: one rule, checked at every intake (a bundle's context.yaml, the service's bodies
and paths, the connectors) and by the dashboard's routes. Pure.

A name is what the scheduler or the node called it, stored as it is (docs/security.md "Untrusted text": quotes,
`$(...)`, spaces, `/` and letters of any script are kept, and never reach a shell): 1 to MAX_NAME characters
that PostgreSQL can store (no NUL, no lone surrogate). A cluster or node name holds none of `[`, `]` and `,` on
top: Slurm's hostlist syntax (`gpu[001-004],gpu010`), in which a context lists its nodes, so a name holding them
could not be told from a list of names (and `scontrol update NodeName=` would read it as one). A job id may hold
anything a name may: a Kueue workload's id is `namespace/name`.

Pages put names into URLs as percent-encoded path segments (attribution.web.urls) and the service's routes take
them back whole, a `/` inside a name included (attribution.api.segments).
"""

from __future__ import annotations

from attribution.errors import InputError

#: The longest name accepted: a DNS name is at most 253 characters (Linux host names at most 64); longer is not a
#: name, and would not fit the store's btree indexes.
MAX_NAME = 255
#: Slurm's hostlist syntax: no cluster or node name holds it.
HOSTLIST_CHARACTERS = frozenset("[],")


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
    problem = text_problem(value)
    if problem is not None:
        return problem
    for c in value:
        if c in HOSTLIST_CHARACTERS:
            return f"{c!r} in a name (Slurm's hostlist syntax)"
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
