"""Bearer tokens and their scopes, read from a file only its owner may read (config.read_secret semantics).

The tokens file has one token per line: its scopes (comma-separated), the token, and an optional name::

    # scopes      token                               name
    report        3f9c0d6e0b6a4c1f9f3b1c2d4e5f60718   node-epilogs
    read          a81b2c3d4e5f60718293a4b5c6d7e8f90   grafana
    read,report   0a1b2c3d4e5f60718293a4b5c6d7e8f9a   admin
    report        5d6e7f8091a2b3c4d5e6f708192a3b4c5   prod-a-nodes   cluster=prod-a nodes=gpu[001-512]
    report        6e7f8091a2b3c4d5e6f708192a3b4c5d6   prod-a-ctld    cluster=prod-a

`report` may post observations and job contexts; `read` may read verdicts, events and fleet views and diagnose
uploaded bundles. A token with `cluster=NAME` may report jobs of that cluster only; with `nodes=HOSTLIST` (a
Slurm hostlist) it may speak only for those nodes: its reports must come from one of them, name only them as the
job's nodes, and be node reports (the job's output and final state are the controller's, whose token names no
nodes). A node token is meant to carry both. Only SHA-256 digests of the
tokens are kept in memory. The file must belong to the user the service runs as (anyone who can write it can
grant themselves any scope) and be readable by that user only.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from attribution.config import read_secret
from attribution.errors import ConfigError

SCOPES = ("report", "read")
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True)
class Principal:
    """Who a request authenticated as."""

    name: str
    scopes: frozenset[str]
    cluster: str | None = None  # a report token bound to one cluster (issue 18, L9)
    nodes: frozenset[str] | None = None  # ... and to the nodes it may speak for (None: any node of its cluster)

    def may_report(self, cluster: str) -> bool:
        return self.cluster is None or self.cluster == cluster

    def refusal(self, cluster: str, nodes, role: str) -> tuple[str, str] | None:
        """Why this token may not report a job of `cluster` naming `nodes` as reporter `role` (node or
        controller): (the metric's reason, the message), or None when it may."""
        if not self.may_report(cluster):
            return "cluster", f"this token may report jobs of cluster {self.cluster!r} only"
        if self.nodes is None:
            return None
        if role != "node":
            return "node", "this token speaks for nodes: it may send node reports only"
        outside = sorted(n for n in nodes if n not in self.nodes)
        if outside:
            shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
            return "node", f"this token may not speak for node(s) {shown}"
        return None


@dataclass(frozen=True)
class TokenTable:
    by_digest: Mapping[bytes, Principal]

    def lookup(self, token: str | None) -> Principal | None:
        if not token:
            return None
        return self.by_digest.get(_digest(token))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_tokens(text: str, origin: str) -> TokenTable:
    """The tokens file's text to a table; every problem is reported as `origin:line: message`."""
    table: dict[bytes, Principal] = {}
    problems: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        bound = [p for p in parts[2:] if p.startswith("cluster=")]
        hosts = [p for p in parts[2:] if p.startswith("nodes=")]
        parts = [p for i, p in enumerate(parts) if i < 2 or not p.startswith(("cluster=", "nodes="))]
        if len(parts) not in (2, 3) or len(bound) > 1 or len(hosts) > 1 or (bound and not bound[0][len("cluster="):]) \
                or (hosts and not hosts[0][len("nodes="):]):
            problems.append(f"{origin}:{no}: expected 'scopes token [name] [cluster=NAME] [nodes=HOSTLIST]'")
            continue
        nodes = None
        if hosts:
            from attribution.errors import InputError
            from attribution.scope.bundle import expand_nodes

            try:
                nodes = frozenset(expand_nodes(hosts[0][len("nodes="):], "nodes"))
            except InputError as exc:
                problems.append(f"{origin}:{no}: nodes=: {exc}")
                continue
        scopes = frozenset(s for s in parts[0].split(",") if s)
        unknown = sorted(scopes - set(SCOPES))
        if unknown or not scopes:
            problems.append(f"{origin}:{no}: unknown scope(s) {', '.join(unknown) or '(none)'}; "
                            f"known: {', '.join(SCOPES)}")
            continue
        token = parts[1]
        if len(token) < MIN_TOKEN_LENGTH or not token.isprintable():
            problems.append(f"{origin}:{no}: token too short (at least {MIN_TOKEN_LENGTH} printable characters)")
            continue
        d = _digest(token)
        if d in table:
            problems.append(f"{origin}:{no}: the same token appears twice")
            continue
        table[d] = Principal(parts[2] if len(parts) == 3 else f"line {no}", scopes,
                             bound[0][len("cluster="):] if bound else None, nodes)
    if problems:
        raise ConfigError("\n".join(problems))
    if not table:
        raise ConfigError(f"{origin}: no tokens")
    return TokenTable(table)


def load_tokens(path: str | Path) -> TokenTable:
    """Read and parse the tokens file; refuses one that group or others may read, or that another user owns."""
    p = Path(path)
    try:
        owner = p.stat().st_uid
    except OSError:
        owner = None  # read_secret says what is wrong
    if owner is not None and owner != os.geteuid():
        raise ConfigError(f"{p}: tokens file belongs to uid {owner}, not to the user the service runs as "
                          f"(uid {os.geteuid()}); whoever owns it can give themselves any scope: "
                          f"run: chown {os.geteuid()} {p}")
    return parse_tokens(read_secret(path), str(path))
