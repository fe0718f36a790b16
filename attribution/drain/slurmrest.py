"""Talking to slurmctld through slurmrestd (JWT auth): node states, drain and resume, for a central host that has
no Slurm client installed. The same interface as `slurmctl.Scontrol`; `controller()` picks one from the settings.

Measured on slurmrestd 24.11.5 (docs/slurm.md): `GET /slurm/v0.0.42/nodes` lists `{"nodes": [{"name",
"state": ["IDLE", "DRAIN"], "reason", ...}], "errors": [], ...}`; `POST /slurm/v0.0.42/node/<name>` with
`{"state": ["DRAIN"], "reason": "..."}` (or `["RESUME"]`) updates one node. Authentication: the headers
X-SLURM-USER-NAME and X-SLURM-USER-TOKEN (a JWT from `scontrol token`) of a Slurm administrator (AdminLevel=Admin
or root: an Operator may not update nodes, "Invalid user id"); a token slurmctld refuses answers 511 with error 1007
"Protocol authentication error", a malformed one 401.

The token is a credential: it is not in the client's repr, and every error passes through the client's Masker
(an answer that echoes the request's headers is quoted with the token masked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlsplit

from attribution.config import ConnectorSettings, SlurmrestdSettings, read_secret
from attribution.drain.policy import NodeState, valid_node_name
from attribution.drain.slurmctl import Scontrol, SlurmError
from attribution.errors import ConfigError
from attribution.secrets import Masker

#: The data_parser versions tried, newest first, when none is configured (24.11 serves these three).
API_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40")


def node_state(doc: dict) -> NodeState:
    """One node of a slurmrestd answer: its state flags joined as scontrol prints them (IDLE+DRAIN)."""
    state = doc.get("state")
    if isinstance(state, list):
        words = [str(s).upper() for s in state]
    else:
        words = [str(state or "UNKNOWN").upper()]
    reason = doc.get("reason")
    return NodeState(str(doc.get("name")), "+".join(words) or "UNKNOWN", reason or None,
                     str(doc.get("reason_set_by_user") or "") or None, epoch_of(doc.get("reason_changed_at")),
                     epoch_of(doc.get("boot_time")), epoch_of(doc.get("slurmd_start_time")))


def epoch_of(value: Any) -> datetime | None:
    """A time of a slurmrestd answer: seconds since the epoch, bare (v0.0.39) or as `{"set": true, "infinite":
    false, "number": N}` (v0.0.40 on); None when unset, infinite or zero."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def errors_of(doc: Any) -> list[str]:
    """The `errors` of an answer, as text ("description (error)")."""
    out = []
    for e in (doc.get("errors") or []) if isinstance(doc, dict) else []:
        if isinstance(e, dict):
            text = e.get("description") or e.get("error") or str(e)
            if e.get("error") and e.get("error") != text:
                text += f" ({e['error']})"
            out.append(text)
        else:
            out.append(str(e))
    return out


@dataclass
class Slurmrestd:
    url: str
    user: str
    token: str = field(repr=False)
    api_version: str | None = None
    timeout: float = 15.0
    ca_file: str | None = None
    masker: Masker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"connectors.slurmrestd.url: expected http(s)://host[:port], got {self.url!r}")
        self.url = self.url.rstrip("/")
        self.masker = Masker.of(self.token)

    def _error(self, message: str) -> SlurmError:
        return SlurmError(self.masker.mask(message))

    def _client(self):
        import httpx

        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token,
                   "Accept": "application/json", "User-Agent": "attribution"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout,
                            verify=self.ca_file if self.ca_file else True)

    def _request(self, method: str, path: str, body: dict | None = None, version: str | None = None) -> dict:
        import httpx

        v = version or self.version()
        what = f"slurmrestd {method} {path}"
        try:
            with self._client() as c:
                r = c.request(method, f"/slurm/{v}{path}", json=body)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise self._error(f"{what}: {type(exc).__name__}: {exc}") from None
        return self._answer(r, what)

    def _answer(self, r, what: str) -> dict:
        try:
            doc = r.json()
        except ValueError:
            doc = None
        errs = errors_of(doc)
        # 401: slurmrestd refused the token itself; 511 (error 1007): slurmctld refused it
        if r.status_code in (401, 403, 511):
            raise self._error(f"{what}: refused ({r.status_code}{': ' + errs[0] if errs else ''}): check "
                              f"connectors.slurmrestd.user and token_file")
        if r.status_code >= 400 or errs:
            raise self._error(f"{what}: {r.status_code}: {'; '.join(errs) or r.text.strip()[:200]}")
        if not isinstance(doc, dict):
            raise self._error(f"{what}: not a JSON object")
        return doc

    def version(self) -> str:
        """The configured data_parser version, else the newest one the server answers (found once)."""
        if self.api_version:
            return self.api_version
        import httpx

        last = "no answer"
        with self._client() as c:
            for v in API_VERSIONS:
                try:
                    r = c.get(f"/slurm/{v}/ping")
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    raise self._error(f"slurmrestd {self.url}: {type(exc).__name__}: {exc}") from None
                if r.status_code in (401, 403, 511):
                    self._answer(r, f"slurmrestd GET /slurm/{v}/ping")
                if r.status_code < 400:
                    self.api_version = v
                    return v
                last = f"{v}: {r.status_code}"
        raise self._error(f"slurmrestd {self.url}: none of {', '.join(API_VERSIONS)} answered ({last})")

    def cluster_name(self) -> str | None:
        doc = self._request("GET", "/diag")
        meta = doc.get("meta") or {}
        name = (meta.get("slurm") or {}).get("cluster")
        return str(name) if name else None

    def nodes(self) -> dict[str, NodeState]:
        doc = self._request("GET", "/nodes")
        out = {}
        for n in doc.get("nodes") or []:
            if isinstance(n, dict) and n.get("name"):
                ns = node_state(n)
                out[ns.name] = ns
        return out

    def node(self, name: str) -> NodeState | None:
        self._check(name)
        doc = self._request("GET", f"/node/{quote(name, safe='')}")
        nodes = [n for n in doc.get("nodes") or [] if isinstance(n, dict) and n.get("name") == name]
        return node_state(nodes[0]) if nodes else None

    def drain(self, node: str, reason: str) -> None:
        self._check(node)
        self._request("POST", f"/node/{quote(node, safe='')}", {"state": ["DRAIN"], "reason": reason})

    def resume(self, node: str) -> None:
        self._check(node)
        self._request("POST", f"/node/{quote(node, safe='')}", {"state": ["RESUME"]})

    @staticmethod
    def _check(node: str) -> None:
        if not valid_node_name(node):
            raise SlurmError(f"refusing node name {node!r}: not a valid Slurm node name")


def from_settings(s: SlurmrestdSettings) -> Slurmrestd:
    if not s.token_file:
        raise ConfigError("connectors.slurmrestd: token_file (a JWT from `scontrol token`) is required")
    return Slurmrestd(url=s.url or "", user=s.user, token=read_secret(s.token_file), api_version=s.api_version,
                      timeout=float(s.timeout), ca_file=s.ca_file)


def controller(connectors: ConnectorSettings, scontrol: str = "/usr/bin/scontrol"):
    """slurmrestd when `connectors.slurmrestd.url` is set, else scontrol at `scontrol`."""
    if connectors.slurmrestd.url:
        return from_settings(connectors.slurmrestd)
    return Scontrol(path=scontrol)


__all__ = ["Slurmrestd", "controller", "from_settings", "node_state", "epoch_of", "errors_of", "API_VERSIONS"]
