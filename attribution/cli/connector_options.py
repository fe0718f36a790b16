"""Command-line flags for the connectors, shared by `diagnose` and `backfill`. A flag overrides the same setting of
the configuration file's `connectors:` section for this run."""

from __future__ import annotations

from dataclasses import replace

import click

from attribution.config import FILE_SOURCES, FileSourceSettings, Settings

_OPTIONS = [
    click.option("--cluster", default=None, help="Cluster name when the scheduler does not say (default: config)."),
    click.option("--loki-url", default=None, metavar="URL", help="Loki base URL (connectors.loki.url)."),
    click.option("--loki-tenant", default=None, metavar="ORG", help="Loki X-Scope-OrgID (connectors.loki.tenant)."),
    click.option("--prometheus-url", default=None, metavar="URL",
                 help="Prometheus base URL for the DCGM metric rules (connectors.prometheus.url)."),
    click.option("--files", "files", multiple=True, metavar="SOURCE=PATH",
                 help="Local log files per node, e.g. kernel=/logs/$node/kern.log* (repeatable; sources: "
                      + ", ".join(FILE_SOURCES) + ")."),
    click.option("--kubectl", default=None, metavar="PATH", help="kubectl to use (connectors.kubernetes.kubectl)."),
    click.option("--kube-context", default=None, help="kubectl context (connectors.kubernetes.context)."),
    click.option("--no-pod-logs", is_flag=True, default=False, help="Do not read the workload's pod logs."),
    click.option("--connector-timeout", type=float, default=None, metavar="SECONDS",
                 help="Longest wait for one request or command of any connector."),
]


def connector_options(f):
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def _file_source(value: str) -> FileSourceSettings:
    source, sep, path = value.partition("=")
    if not sep or source not in FILE_SOURCES or not path:
        raise click.BadParameter(f"expected SOURCE=PATH with SOURCE one of {', '.join(FILE_SOURCES)}, got {value!r}",
                                 param_hint="--files")
    return FileSourceSettings(path=path, source=source)


def apply_connector_options(settings: Settings, cluster=None, loki_url=None, loki_tenant=None, prometheus_url=None,
                            files=(), kubectl=None, kube_context=None, no_pod_logs=False,
                            connector_timeout=None) -> Settings:
    c = settings.connectors
    loki, prom, kube, slurm = c.loki, c.prometheus, c.kubernetes, c.slurm
    if loki_url:
        loki = replace(loki, url=loki_url)
    if loki_tenant:
        loki = replace(loki, tenant=loki_tenant)
    if prometheus_url:
        prom = replace(prom, url=prometheus_url)
    if kubectl:
        kube = replace(kube, kubectl=kubectl)
    if kube_context:
        kube = replace(kube, context=kube_context)
    if no_pod_logs:
        kube = replace(kube, pod_logs=False)
    if connector_timeout is not None:
        if connector_timeout <= 0:
            raise click.BadParameter("must be a positive number of seconds", param_hint="--connector-timeout")
        loki, prom = replace(loki, timeout=connector_timeout), replace(prom, timeout=connector_timeout)
        kube, slurm = replace(kube, timeout=connector_timeout), replace(slurm, timeout=connector_timeout)
    extra = tuple(_file_source(v) for v in files)
    connectors = replace(c, loki=loki, prometheus=prom, kubernetes=kube, slurm=slurm, files=c.files + extra)
    return replace(settings, connectors=connectors, cluster=cluster or settings.cluster)


__all__ = ["connector_options", "apply_connector_options"]
