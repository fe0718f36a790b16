"""The configuration's sections as frozen pydantic dataclasses: every setting, its type, its default and its
check, in one place. Unknown keys are refused (`extra="forbid"`); a wrong type or a bad value fails validation
with the key's location, which `config.load` turns into `file:line: problem`.

Types are written `Optional[...]` / `Tuple[...]`: pydantic evaluates them, and the node agent's interpreter may be
Python 3.9 (where `str | None` does not evaluate).
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Dict, Optional, Tuple

from pydantic import BeforeValidator, ConfigDict, model_validator
from pydantic.dataclasses import dataclass

from attribution.config.alerts import AlertSettings

#: the log sources a file or Loki stream may hold
FILE_SOURCES = ("kernel", "fabricmanager", "node", "job")
_CONFIG = ConfigDict(extra="forbid")


def default_home() -> Path:
    """Where the embedded database and the spool live when nothing is configured."""
    env = os.environ.get("ATTRIBUTION_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/attribution")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "attribution"


# -- value checks (each message starts with "must": it reads after the setting's name) ---------------------------

def _whole(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"must be a positive whole number, got {v!r}")
    return v


def _seconds(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ValueError(f"must be a positive number of seconds, got {v!r}")
    return v


def _integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"must be a whole number, got {v!r}")
    return v


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number, got {v!r}")
    return v


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def _mapping(v: Any) -> dict:
    if not isinstance(v, dict):
        raise ValueError("must be a mapping")
    return v


def _names(v: Any) -> tuple:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise ValueError("must be a list of names")
    return tuple(v)


def _text(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _one_of(*allowed: str):
    def check(v: Any) -> str:
        if v not in allowed:
            raise ValueError(f"must be {' or '.join(allowed)}" if len(allowed) == 2
                             else f"must be one of {', '.join(allowed)}")
        return v
    return check


def _api_version(v: Any) -> Optional[str]:
    if v is not None and not (isinstance(v, str) and re.fullmatch(r"v\d+\.\d+\.\d+", v)):
        raise ValueError(f"expected e.g. v0.0.42, got {v!r}")
    return v


def _host_port(v: Any) -> str:
    if not isinstance(v, str) or split_host_port(v) is None:
        raise ValueError(f"expected host:port, got {v!r}")
    return v


def split_host_port(listen: str) -> Optional[Tuple[str, int]]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


Whole = Annotated[int, BeforeValidator(_whole)]
Seconds = Annotated[float, BeforeValidator(_seconds)]
Integer = Annotated[int, BeforeValidator(_integer)]
Number = Annotated[float, BeforeValidator(_number)]
Flag = Annotated[bool, BeforeValidator(_flag)]
Mapping_ = Annotated[Dict[str, Any], BeforeValidator(_mapping)]


def _unset_is_default(data: Any, names: Tuple[str, ...]) -> Any:
    """A section or path given as an empty key (`database:`), null or empty is its default, as if left out."""
    if data is None:
        return {}
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if not (k in names and v in (None, "", {}))}
    return data


@dataclass(frozen=True, config=_CONFIG)
class DatabaseSettings:
    url: Optional[str] = None
    password_file: Optional[str] = None
    connect_timeout: Number = 5.0
    statement_timeout_ms: Integer = 30000
    lock_timeout_ms: Integer = 10000
    #: the server ends a session left idle inside a transaction this long (a client that vanished mid-ingest
    #: must not hold a job's lock for ever; issue 18, M2)
    idle_in_transaction_timeout_ms: Integer = 60000
    #: TCP keepalive and user timeout: a dead peer or path is noticed within about this many seconds
    tcp_timeout_seconds: Integer = 30
    pool_size: Integer = 2


@dataclass(frozen=True, config=_CONFIG)
class EpilogSettings:
    budget_seconds: Number = 20.0
    kernel_source: str = "auto"  # auto | journald | dmesg | file
    kernel_file: Optional[str] = None  # used when kernel_source is file (e.g. /var/log/kern.log)
    fabricmanager_log: str = "/var/log/fabricmanager.log"
    lookback_seconds: Integer = 86400  # when neither Slurm nor the prolog says when the job started
    state_dir: Optional[str] = None  # prolog start stamps; default <home>/state
    job_output: Flag = True  # the controller hook reads the job's stdout/stderr
    job_output_bytes: Whole = 16 * 1024 * 1024  # ... at most the last this many bytes of each (issue 18: bounded)
    node_log_bytes: Whole = 64 * 1024 * 1024  # of the kernel and Fabric Manager logs: from the job's start on


# -- connectors: where a job's context and evidence live when it is not an incident bundle ---------------------


@dataclass(frozen=True, config=_CONFIG)
class HttpAuthSettings:
    """How to reach an HTTP API (Loki, Prometheus): credentials only ever come from owner-only files."""

    url: Optional[str] = None  # unset: the connector is off
    tenant: Optional[str] = None  # X-Scope-OrgID (multi-tenant Loki / Mimir); several tenants joined with '|'
    username: Optional[str] = None  # basic auth user; the password comes from password_file
    password_file: Optional[str] = None
    token_file: Optional[str] = None  # bearer token
    ca_file: Optional[str] = None  # CA bundle for https
    timeout: Seconds = 10.0  # seconds for one HTTP request (connect, send, and the whole answer)
    budget: Seconds = 60.0  # seconds for all of this connector's requests for one job


def _known_sources(v: tuple) -> tuple:
    bad = sorted(set(v) - set(FILE_SOURCES))
    if bad:
        raise ValueError(f"unknown source(s) {', '.join(bad)} (known: {', '.join(FILE_SOURCES)})")
    return v


@dataclass(frozen=True, config=_CONFIG)
class LokiSettings(HttpAuthSettings):
    limit: Whole = 5000  # entries per query_range page (Loki's default max_entries_limit_per_query)
    direction: Annotated[str, BeforeValidator(_one_of("forward", "backward"))] = "forward"  # the order pages come in
    max_entries: Whole = 2_000_000  # per stream selector, to keep memory bounded
    node_label: str = "host"  # the stream label that holds the node name
    source_label: str = "source"  # the stream label that names the log source (kernel, fabricmanager, job)
    job_label: str = "job_id"  # the stream label that holds the scheduler's job id on job-output streams
    sources: Annotated[Tuple[str, ...], BeforeValidator(lambda v: _known_sources(_names(v)))] = (
        "kernel", "fabricmanager", "job")
    #: Per source, a whole LogQL query replacing the default selector; $node, $job_id and $cluster are replaced
    #: by LogQL-quoted values, e.g. {kernel: '{host="$node", unit="kernel"} |= "NVRM"'}.
    selectors: Mapping_ = field(default_factory=dict)


@dataclass(frozen=True, config=_CONFIG)
class PrometheusSettings(HttpAuthSettings):
    step: Seconds = 15.0  # query_range resolution in seconds (raised when the window needs it)
    #: Label names of the metric rules' label roles, overriding rules/metrics.yaml: node, gpu (PCI bus id),
    #: gpu_index, uuid. E.g. {node: instance_hostname}.
    labels: Mapping_ = field(default_factory=dict)
    matchers: Optional[str] = None  # extra label matchers for every query, e.g. 'job="dcgm-exporter"'


#: The pods of a Workload, by the kind of the Workload's owner; $name is the owner's name.
DEFAULT_POD_SELECTORS = {
    "Job": "batch.kubernetes.io/job-name=$name",
    "JobSet": "jobset.sigs.k8s.io/jobset-name=$name",
    "PyTorchJob": "training.kubeflow.org/job-name=$name",
    "MPIJob": "training.kubeflow.org/job-name=$name",
    "RayJob": "ray.io/cluster=$name",
    "Pod": "kueue.x-k8s.io/pod-group-name=$name",
}


@dataclass(frozen=True, config=_CONFIG)
class KubernetesSettings:
    kubectl: str = "kubectl"
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    timeout: Seconds = 30.0  # seconds for one kubectl call
    budget: Seconds = 120.0  # seconds for all kubectl calls of one workload
    previous: Flag = True  # also read the previous instance of restarted containers (kubectl logs --previous)
    pod_logs: Flag = True
    #: The Kubernetes API (`attribution watch kueue`, `backfill --kueue`: the `kubernetes` extra): its URL, with a
    #: bearer token and a CA from owner-only files; unset: the pod's service account in a cluster, else kubeconfig
    api_server: Annotated[Optional[str], BeforeValidator(_text)] = None
    token_file: Optional[str] = None
    ca_file: Optional[str] = None
    #: the configured owner kinds are added to (or replace) the defaults
    pod_selectors: Annotated[Dict[str, str], BeforeValidator(lambda v: {**DEFAULT_POD_SELECTORS, **_mapping(v)})] = \
        field(default_factory=lambda: dict(DEFAULT_POD_SELECTORS))


@dataclass(frozen=True, config=_CONFIG)
class SlurmCommandSettings:
    sacct: str = "sacct"
    scontrol: str = "scontrol"
    timeout: Seconds = 30.0  # seconds for one sacct / scontrol call
    job_output: Flag = True  # read the job's stdout/stderr files when they are readable from here


@dataclass(frozen=True, config=_CONFIG)
class SlurmrestdSettings:
    """slurmrestd, for `attribution drain` on a host without a Slurm client: set `url` and drains, resumes and node
    states go through it (JWT auth) instead of scontrol."""

    url: Optional[str] = None  # e.g. http://slurmctl:6820; unset: scontrol
    user: str = "root"  # X-SLURM-USER-NAME: the Slurm user the token was made for (an operator or SlurmUser)
    token_file: Optional[str] = None  # the JWT (`scontrol token username=... lifespan=...`), owner-only file
    #: e.g. v0.0.42; unset: the newest of v0.0.42, v0.0.41, v0.0.40 it answers
    api_version: Annotated[Optional[str], BeforeValidator(_api_version)] = None
    ca_file: Optional[str] = None  # CA bundle for https
    timeout: Seconds = 15.0  # seconds for one request


@dataclass(frozen=True, config=_CONFIG)
class FileSourceSettings:
    """Local (or shared-filesystem) log files: a path or glob per node; $node, $job_id and $cluster replaced."""

    path: str
    source: Annotated[str, BeforeValidator(_one_of(*FILE_SOURCES))] = "node"  # kernel | fabricmanager | node | job

    @model_validator(mode="before")
    @classmethod
    def _a_path_alone(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"path": data}
        if not isinstance(data, dict) and not hasattr(data, "kwargs"):
            raise ValueError("must be a path or a mapping")
        return data


def _file_list(v: Any) -> tuple:
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        raise ValueError("must be a list of {path, source}")
    return tuple(v)


@dataclass(frozen=True, config=_CONFIG)
class ConnectorSettings:
    loki: LokiSettings = field(default_factory=LokiSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    slurm: SlurmCommandSettings = field(default_factory=SlurmCommandSettings)
    slurmrestd: SlurmrestdSettings = field(default_factory=SlurmrestdSettings)
    files: Annotated[Tuple[FileSourceSettings, ...], BeforeValidator(_file_list)] = ()

    @model_validator(mode="before")
    @classmethod
    def _unset_sections(cls, data: Any) -> Any:
        return _unset_is_default(data, ("loki", "prometheus", "kubernetes", "slurm", "slurmrestd"))


@dataclass(frozen=True, config=_CONFIG)
class KueueWatchSettings:
    """`attribution watch kueue`: every failed Kueue workload diagnosed and stored as it ends (docs/kubernetes.md)."""

    serve: Flag = False  # `attribution serve` runs the watcher beside the service (one process, not per worker)
    #: the Workload API version watched: auto is v1beta2 where the server has it (Kueue 0.15+), else v1beta1
    api_version: Annotated[str, BeforeValidator(_one_of("auto", "v1beta2", "v1beta1"))] = "auto"
    namespaces: Annotated[Tuple[str, ...], BeforeValidator(_names)] = ()  # empty: every namespace
    concurrency: Whole = 2  # workloads diagnosed at once
    workload_seconds: Seconds = 300.0  # the longest one workload's diagnosis and storing may take
    watch_seconds: Whole = 300  # timeoutSeconds of one watch request; the server ends it and the watcher goes on
    page_size: Whole = 500  # objects per list page (limit / continue)
    retry_seconds: Seconds = 5.0  # the pause before watching again after the connection failed


@dataclass(frozen=True, config=_CONFIG)
class WatchSettings:
    kueue: KueueWatchSettings = field(default_factory=KueueWatchSettings)

    @model_validator(mode="before")
    @classmethod
    def _unset_sections(cls, data: Any) -> Any:
        return _unset_is_default(data, ("kueue",))


@dataclass(frozen=True, config=_CONFIG)
class ServiceSettings:
    """The Attribution Service (`attribution serve`): where it listens, who may call it, how much it accepts."""

    listen: Annotated[str, BeforeValidator(_host_port)] = "127.0.0.1:8080"  # host:port
    tokens_file: Optional[str] = None  # bearer tokens and their scopes; must not be readable by group or others
    max_body_bytes: Whole = 16 * 1024 * 1024  # a JSON request (one observation batch, one context)
    max_upload_bytes: Whole = 64 * 1024 * 1024  # an incident bundle posted to /v1/diagnose (tar.gz, as sent)
    max_bundle_bytes: Whole = 512 * 1024 * 1024  # that bundle unpacked
    max_bundle_files: Whole = 10000  # members of that bundle
    max_events: Whole = 200000  # observation records in one report (a controller's)
    #: while a job's reports keep arriving, its verdict is computed at most once per this many seconds per worker
    #: (the pieces in between are stored and the job left pending; one attribution after the last of them); 0:
    #: every report re-attributes its job
    settle_seconds: Annotated[float, BeforeValidator(_number)] = 2.0
    body_timeout_seconds: Seconds = 60.0  # to receive a whole request body
    request_timeout_seconds: Seconds = 30.0  # to wait for a database connection and to ingest one batch
    db_pool_size: Whole = 8  # database connections per worker process (also its concurrent ingests)
    diagnose_concurrency: Whole = 2  # bundles diagnosed at once per worker process
    workers: Whole = 1  # worker processes
    client_timeout_seconds: Seconds = 10.0  # the controller's hook: the longest one report to the service may take
    # /v1/diagnose runs each bundle in a child process with these budgets (issue 18, M5)
    diagnose_cpu_seconds: Whole = 120  # CPU time of one diagnosis
    diagnose_memory_bytes: Whole = 2 * 1024 * 1024 * 1024  # address space of that process
    diagnose_wall_seconds: Seconds = 180.0  # wall time of one diagnosis
    # connections (issue 18, M6): at most this many at once per worker; past it the oldest one that has not
    # sent its request headers is closed; headers must arrive within header_timeout_seconds
    max_connections: Whole = 512
    header_timeout_seconds: Seconds = 10.0

    def host_port(self) -> Tuple[str, int]:
        return split_host_port(self.listen)  # checked when the settings were made


def _absolute(v: Any) -> str:
    if not isinstance(v, str) or not v.startswith("/"):
        raise ValueError(f"must be an absolute path, got {v!r}")
    return v


@dataclass(frozen=True, config=_CONFIG)
class JobActionSettings:
    """What attribution does to a failed job in Slurm once it has its verdict (docs/job-actions.md), both off by
    default; the process that attributes the job acts (the controller's epilog storing into the database, or the
    service)."""

    admin_comment: Flag = False  # the job's AdminComment: one line of its verdict, updated when it changes
    requeue: Flag = False  # requeue a job that allows it around its culprits (rules/requeue-policy.yaml)
    scontrol: Annotated[str, BeforeValidator(_absolute)] = "/usr/bin/scontrol"
    sacctmgr: Annotated[str, BeforeValidator(_absolute)] = "/usr/bin/sacctmgr"  # a finished job's record
    timeout_seconds: Seconds = 10.0  # one Slurm command


def _path_or_unset(v: Any) -> Any:
    return v or None  # an empty value is the default


@dataclass(frozen=True, config=_CONFIG)
class Settings:
    home: Path = field(default_factory=default_home)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    epilog: EpilogSettings = field(default_factory=EpilogSettings)
    service: ServiceSettings = field(default_factory=ServiceSettings)
    spool_dir: Annotated[Optional[Path], BeforeValidator(_path_or_unset)] = None
    rules_dir: Annotated[Optional[Path], BeforeValidator(_path_or_unset)] = None
    cluster: Annotated[Optional[str], BeforeValidator(_text)] = None
    service_url: Annotated[Optional[str], BeforeValidator(_text)] = None
    service_token_file: Annotated[Optional[str], BeforeValidator(_text)] = None
    source: Optional[str] = None  # the file these settings came from
    connectors: ConnectorSettings = field(default_factory=ConnectorSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    job_actions: JobActionSettings = field(default_factory=JobActionSettings)
    #: the `alerts:` section (attribution.config.alerts); None when the file has none
    alerts: Annotated[Optional[AlertSettings], BeforeValidator(lambda v: {} if v is None else v)] = None

    @model_validator(mode="before")
    @classmethod
    def _unset_sections(cls, data: Any) -> Any:
        return _unset_is_default(data, ("home", "database", "epilog", "service", "connectors", "watch",
                                       "job_actions"))

    @property
    def spool(self) -> Path:
        return self.spool_dir or self.home / "spool"

    @property
    def embedded_dir(self) -> Path:
        return self.home / "pg"


__all__ = ["FILE_SOURCES", "DEFAULT_POD_SELECTORS", "default_home", "split_host_port", "DatabaseSettings",
           "EpilogSettings", "HttpAuthSettings", "LokiSettings", "PrometheusSettings", "KubernetesSettings",
           "SlurmCommandSettings", "SlurmrestdSettings", "FileSourceSettings", "ConnectorSettings",
           "KueueWatchSettings", "WatchSettings", "ServiceSettings", "JobActionSettings", "Settings"]
