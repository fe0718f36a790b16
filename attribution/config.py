"""Settings: the configuration file, environment overrides, and credentials read from root-only files.

Looked up in this order: `--config` / `$ATTRIBUTION_CONFIG`, `/etc/attribution/config.yaml`,
`~/.config/attribution/config.yaml`. Without any file every setting has a default. A database password is never
in the file or on a command line: it comes from `database.password_file`, which must not be readable by
group or others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from attribution.errors import ConfigError

SYSTEM_CONFIG = Path("/etc/attribution/config.yaml")


def user_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "attribution" / "config.yaml"


def default_home() -> Path:
    """Where the embedded database and the spool live when nothing is configured."""
    env = os.environ.get("ATTRIBUTION_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/attribution")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "attribution"


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None = None
    password_file: str | None = None
    connect_timeout: float = 5.0
    statement_timeout_ms: int = 30000
    lock_timeout_ms: int = 10000
    #: the server ends a session left idle inside a transaction this long (a client that vanished mid-ingest
    #: must not hold a job's lock for ever; issue 18, M2)
    idle_in_transaction_timeout_ms: int = 60000
    #: TCP keepalive and user timeout: a dead peer or path is noticed within about this many seconds
    tcp_timeout_seconds: int = 30
    pool_size: int = 2


@dataclass(frozen=True)
class EpilogSettings:
    budget_seconds: float = 20.0
    kernel_source: str = "auto"  # auto | journald | dmesg | file
    kernel_file: str | None = None  # used when kernel_source is file (e.g. /var/log/kern.log)
    fabricmanager_log: str = "/var/log/fabricmanager.log"
    lookback_seconds: int = 86400  # when neither Slurm nor the prolog says when the job started
    state_dir: str | None = None  # prolog start stamps; default <home>/state
    job_output: bool = True  # the controller hook reads the job's stdout/stderr
    job_output_bytes: int = 16 * 1024 * 1024  # ... at most the last this many bytes of each (issue 18: bounded)
    node_log_bytes: int = 64 * 1024 * 1024  # of the kernel and Fabric Manager logs: from the job's start on


# -- connectors: where a job's context and evidence live when it is not an incident bundle ---------------------


@dataclass(frozen=True)
class HttpAuthSettings:
    """How to reach an HTTP API (Loki, Prometheus): credentials only ever come from owner-only files."""

    url: str | None = None  # unset: the connector is off
    tenant: str | None = None  # X-Scope-OrgID (multi-tenant Loki / Mimir); several tenants joined with '|'
    username: str | None = None  # basic auth user; the password comes from password_file
    password_file: str | None = None
    token_file: str | None = None  # bearer token
    ca_file: str | None = None  # CA bundle for https
    timeout: float = 10.0  # seconds for one HTTP request (connect, send, and the whole answer)
    budget: float = 60.0  # seconds for all of this connector's requests for one job


@dataclass(frozen=True)
class LokiSettings(HttpAuthSettings):
    limit: int = 5000  # entries per query_range page (Loki's default max_entries_limit_per_query)
    direction: str = "forward"  # forward | backward: the order pages are fetched in
    max_entries: int = 2_000_000  # per stream selector, to keep memory bounded
    node_label: str = "host"  # the stream label that holds the node name
    source_label: str = "source"  # the stream label that names the log source (kernel, fabricmanager, job)
    job_label: str = "job_id"  # the stream label that holds the scheduler's job id on job-output streams
    sources: tuple[str, ...] = ("kernel", "fabricmanager", "job")
    #: Per source, a whole LogQL query replacing the default selector; $node, $job_id and $cluster are replaced
    #: by LogQL-quoted values, e.g. {kernel: '{host="$node", unit="kernel"} |= "NVRM"'}.
    selectors: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PrometheusSettings(HttpAuthSettings):
    step: float = 15.0  # query_range resolution in seconds (raised when the window needs it)
    #: Label names of the metric rules' label roles, overriding rules/metrics.yaml: node, gpu (PCI bus id),
    #: gpu_index, uuid. E.g. {node: instance_hostname}.
    labels: dict = field(default_factory=dict)
    matchers: str | None = None  # extra label matchers for every query, e.g. 'job="dcgm-exporter"'


@dataclass(frozen=True)
class KubernetesSettings:
    kubectl: str = "kubectl"
    kubeconfig: str | None = None
    context: str | None = None
    timeout: float = 30.0  # seconds for one kubectl call
    budget: float = 120.0  # seconds for all kubectl calls of one workload
    previous: bool = True  # also read the previous instance of restarted containers (kubectl logs --previous)
    pod_logs: bool = True
    #: The pods of a Workload, by the kind of the Workload's owner; $name is the owner's name.
    pod_selectors: dict = field(default_factory=lambda: {
        "Job": "batch.kubernetes.io/job-name=$name",
        "JobSet": "jobset.sigs.k8s.io/jobset-name=$name",
        "PyTorchJob": "training.kubeflow.org/job-name=$name",
        "MPIJob": "training.kubeflow.org/job-name=$name",
        "RayJob": "ray.io/cluster=$name",
        "Pod": "kueue.x-k8s.io/pod-group-name=$name",
    })


@dataclass(frozen=True)
class SlurmCommandSettings:
    sacct: str = "sacct"
    scontrol: str = "scontrol"
    timeout: float = 30.0  # seconds for one sacct / scontrol call
    job_output: bool = True  # read the job's stdout/stderr files when they are readable from here


@dataclass(frozen=True)
class SlurmrestdSettings:
    """slurmrestd, for `attribution drain` on a host without a Slurm client: set `url` and drains, resumes and node
    states go through it (JWT auth) instead of scontrol."""

    url: str | None = None  # e.g. http://slurmctl:6820; unset: scontrol
    user: str = "root"  # X-SLURM-USER-NAME: the Slurm user the token was made for (an operator or SlurmUser)
    token_file: str | None = None  # the JWT (`scontrol token username=... lifespan=...`), owner-only file
    api_version: str | None = None  # e.g. v0.0.42; unset: the newest of v0.0.42, v0.0.41, v0.0.40 it answers
    ca_file: str | None = None  # CA bundle for https
    timeout: float = 15.0  # seconds for one request


@dataclass(frozen=True)
class FileSourceSettings:
    """Local (or shared-filesystem) log files: a path or glob per node; $node, $job_id and $cluster replaced."""

    path: str
    source: str = "node"  # kernel | fabricmanager | node | job


@dataclass(frozen=True)
class ConnectorSettings:
    loki: LokiSettings = field(default_factory=LokiSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    slurm: SlurmCommandSettings = field(default_factory=SlurmCommandSettings)
    slurmrestd: SlurmrestdSettings = field(default_factory=SlurmrestdSettings)
    files: tuple[FileSourceSettings, ...] = ()


FILE_SOURCES = ("kernel", "fabricmanager", "node", "job")


def parse_connectors(data: Any, origin: str) -> ConnectorSettings:
    """The `connectors:` section of the configuration file."""
    if data is None:
        return ConnectorSettings()
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: 'connectors' must be a mapping")
    unknown = sorted(set(data) - {"loki", "prometheus", "kubernetes", "slurm", "slurmrestd", "files"})
    if unknown:
        raise ConfigError(f"{origin}: unknown setting(s) in 'connectors': {', '.join(unknown)}")
    loki = dict(_section(data, "loki", origin))
    if "sources" in loki:
        loki["sources"] = _str_list(loki["sources"], origin, "connectors.loki.sources")
        bad = sorted(set(loki["sources"]) - set(FILE_SOURCES))
        if bad:
            raise ConfigError(f"{origin}: connectors.loki.sources: unknown source(s) {', '.join(bad)} "
                              f"(known: {', '.join(FILE_SOURCES)})")
    for name in ("selectors",):
        if name in loki and not isinstance(loki[name], dict):
            raise ConfigError(f"{origin}: connectors.loki.{name} must be a mapping")
    built_loki = _build(LokiSettings, loki, origin, "connectors.loki")
    if built_loki.direction not in ("forward", "backward"):
        raise ConfigError(f"{origin}: connectors.loki.direction must be forward or backward")
    for name in ("limit", "max_entries"):
        v = getattr(built_loki, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{origin}: connectors.loki.{name} must be a positive whole number")
    prom = dict(_section(data, "prometheus", origin))
    if "labels" in prom and not isinstance(prom["labels"], dict):
        raise ConfigError(f"{origin}: connectors.prometheus.labels must be a mapping")
    built_prom = _build(PrometheusSettings, prom, origin, "connectors.prometheus")
    if not isinstance(built_prom.step, (int, float)) or built_prom.step <= 0:
        raise ConfigError(f"{origin}: connectors.prometheus.step must be a positive number of seconds")
    kube = dict(_section(data, "kubernetes", origin))
    if "pod_selectors" in kube:
        if not isinstance(kube["pod_selectors"], dict):
            raise ConfigError(f"{origin}: connectors.kubernetes.pod_selectors must be a mapping")
        kube["pod_selectors"] = {**KubernetesSettings().pod_selectors, **kube["pod_selectors"]}
    built_kube = _build(KubernetesSettings, kube, origin, "connectors.kubernetes")
    built_slurm = _build(SlurmCommandSettings, _section(data, "slurm", origin), origin, "connectors.slurm")
    built_restd = _build(SlurmrestdSettings, _section(data, "slurmrestd", origin), origin, "connectors.slurmrestd")
    if built_restd.api_version is not None and not re_api_version(built_restd.api_version):
        raise ConfigError(f"{origin}: connectors.slurmrestd.api_version: expected e.g. v0.0.42, got "
                          f"{built_restd.api_version!r}")
    files_raw = data.get("files") or []
    if not isinstance(files_raw, list):
        raise ConfigError(f"{origin}: connectors.files must be a list of {{path, source}}")
    files = []
    for i, item in enumerate(files_raw):
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict):
            raise ConfigError(f"{origin}: connectors.files[{i}] must be a path or a mapping")
        fs = _build(FileSourceSettings, item, origin, f"connectors.files[{i}]")
        if fs.source not in FILE_SOURCES:
            raise ConfigError(f"{origin}: connectors.files[{i}].source must be one of {', '.join(FILE_SOURCES)}")
        files.append(fs)
    for section, s in (("loki", built_loki), ("prometheus", built_prom), ("kubernetes", built_kube),
                       ("slurm", built_slurm), ("slurmrestd", built_restd)):
        for name in ("timeout", "budget"):
            v = getattr(s, name, None)
            if v is not None and (not isinstance(v, (int, float)) or v <= 0):
                raise ConfigError(f"{origin}: connectors.{section}.{name} must be a positive number of seconds")
    return ConnectorSettings(loki=built_loki, prometheus=built_prom, kubernetes=built_kube, slurm=built_slurm,
                             slurmrestd=built_restd, files=tuple(files))


def re_api_version(v: object) -> bool:
    import re

    return isinstance(v, str) and re.fullmatch(r"v\d+\.\d+\.\d+", v) is not None


def _str_list(value: Any, origin: str, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{origin}: {name} must be a list of names")
    return tuple(value)


@dataclass(frozen=True)
class ServiceSettings:
    """The Attribution Service (`attribution serve`): where it listens, who may call it, how much it accepts."""

    listen: str = "127.0.0.1:8080"  # host:port
    tokens_file: str | None = None  # bearer tokens and their scopes; must not be readable by group or others
    max_body_bytes: int = 16 * 1024 * 1024  # a JSON request (one observation batch, one context)
    max_upload_bytes: int = 64 * 1024 * 1024  # an incident bundle posted to /v1/diagnose (tar.gz, as sent)
    max_bundle_bytes: int = 512 * 1024 * 1024  # that bundle unpacked
    max_bundle_files: int = 10000  # members of that bundle
    max_events: int = 200000  # events in one observation batch
    body_timeout_seconds: float = 60.0  # to receive a whole request body
    request_timeout_seconds: float = 30.0  # to wait for a database connection and to ingest one batch
    db_pool_size: int = 8  # database connections per worker process (also its concurrent ingests)
    diagnose_concurrency: int = 2  # bundles diagnosed at once per worker process
    workers: int = 1  # worker processes
    client_timeout_seconds: float = 10.0  # hooks: the longest one report to the service may take
    # /v1/diagnose runs each bundle in a child process with these budgets (issue 18, M5)
    diagnose_cpu_seconds: int = 120  # CPU time of one diagnosis
    diagnose_memory_bytes: int = 2 * 1024 * 1024 * 1024  # address space of that process
    diagnose_wall_seconds: float = 180.0  # wall time of one diagnosis
    # connections (issue 18, M6): at most this many at once per worker; past it the oldest one that has not
    # sent its request headers is closed; headers must arrive within header_timeout_seconds
    max_connections: int = 512
    header_timeout_seconds: float = 10.0

    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"service.listen: expected host:port, got {self.listen!r}")
        return host.strip("[]") or "127.0.0.1", int(port)


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=default_home)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    epilog: EpilogSettings = field(default_factory=EpilogSettings)
    service: ServiceSettings = field(default_factory=ServiceSettings)
    spool_dir: Path | None = None
    rules_dir: Path | None = None
    cluster: str | None = None
    service_url: str | None = None
    service_token_file: str | None = None
    source: str | None = None  # the file these settings came from
    connectors: ConnectorSettings = field(default_factory=ConnectorSettings)
    alerts: Any = None  # attribution.alerts.settings.AlertSettings (parsed only when the section is given)

    @property
    def spool(self) -> Path:
        return self.spool_dir or self.home / "spool"

    @property
    def embedded_dir(self) -> Path:
        return self.home / "pg"


def _section(data: dict, name: str, origin: str) -> dict:
    v = data.get(name) or {}
    if not isinstance(v, dict):
        raise ConfigError(f"{origin}: '{name}' must be a mapping")
    return v


def _build(cls, values: dict, origin: str, section: str):
    known = {f for f in cls.__dataclass_fields__}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{origin}: unknown setting(s) in '{section}': {', '.join(unknown)}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"{origin}: {section}: {exc}") from None


def _check_epilog(e: EpilogSettings, origin: str) -> EpilogSettings:
    for name in ("job_output_bytes", "node_log_bytes"):
        v = getattr(e, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{origin}: epilog.{name}: expected a positive whole number, got {v!r}")
    return e


def parse_settings(data: Any, origin: str) -> Settings:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping")
    top = {"home", "database", "epilog", "service", "spool_dir", "rules_dir", "cluster", "service_url",
           "service_token_file", "connectors", "alerts"}
    unknown = sorted(set(data) - top)
    if unknown:
        raise ConfigError(f"{origin}: unknown setting(s): {', '.join(unknown)}")
    s = Settings(source=origin)
    if data.get("home"):
        s = replace(s, home=Path(data["home"]))
    s = replace(s, database=_build(DatabaseSettings, _section(data, "database", origin), origin, "database"),
                epilog=_check_epilog(_build(EpilogSettings, _section(data, "epilog", origin), origin, "epilog"),
                                     origin),
                service=_check_service(_build(ServiceSettings, _section(data, "service", origin), origin,
                                              "service"), origin))
    for key in ("spool_dir", "rules_dir"):
        if data.get(key):
            s = replace(s, **{key: Path(data[key])})
    for key in ("cluster", "service_url", "service_token_file"):
        if data.get(key) is not None:
            s = replace(s, **{key: str(data[key])})
    if "connectors" in data:
        s = replace(s, connectors=parse_connectors(data["connectors"], origin))
    if "alerts" in data:
        from attribution.alerts.settings import parse_alerts

        s = replace(s, alerts=parse_alerts(data["alerts"], origin))
    return s


def _check_service(s: ServiceSettings, origin: str) -> ServiceSettings:
    if not isinstance(s.listen, str):
        raise ConfigError(f"{origin}: service.listen: expected host:port")
    for name in ("max_body_bytes", "max_upload_bytes", "max_bundle_bytes", "max_bundle_files", "max_events",
                 "db_pool_size", "diagnose_concurrency", "workers", "diagnose_cpu_seconds", "diagnose_memory_bytes",
                 "max_connections"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{origin}: service.{name}: expected a positive whole number, got {v!r}")
    for name in ("body_timeout_seconds", "request_timeout_seconds", "client_timeout_seconds",
                 "diagnose_wall_seconds", "header_timeout_seconds"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(f"{origin}: service.{name}: expected a positive number of seconds, got {v!r}")
    if s.tokens_file is not None and not isinstance(s.tokens_file, str):
        raise ConfigError(f"{origin}: service.tokens_file: expected a path")
    try:
        s.host_port()
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    return s


def load_settings(path: str | Path | None = None) -> Settings:
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
            try:
                text = p.read_text()
            except OSError as exc:
                raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"{p}:{mark.line + 1}" if mark else str(p)
                raise ConfigError(f"{where}: malformed YAML") from None
            settings = parse_settings(data, str(p))
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


# read_secret lives in attribution.secrets (the node agent reads its token without importing this module)
from attribution.secrets import read_secret  # noqa: E402
