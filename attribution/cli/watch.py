"""`attribution watch kueue`: diagnose and store every failed Kueue workload as it ends (attribution.watch.kueue)."""

from __future__ import annotations

import signal
import sys

import click

from attribution.cli import main, ruleset_of, settings_of

def kube_settings(settings, cluster: str | None, api_server: str | None):
    """The settings with the command's --cluster and --api-server; ConfigError without a cluster name."""
    from dataclasses import replace

    from attribution.errors import ConfigError

    if api_server:
        c = settings.connectors
        settings = replace(settings, connectors=replace(c, kubernetes=replace(c.kubernetes, api_server=api_server)))
    if cluster:
        settings = replace(settings, cluster=cluster)
    if not settings.cluster:
        raise ConfigError("no cluster name: set `cluster:` in the configuration or pass --cluster (the Kubernetes "
                          "API does not say which cluster it is)")
    return settings


def open_api(settings):
    """The Kubernetes API connection (the `kubernetes` extra: cli's EXTRA_OF names it when it is missing)."""
    from attribution.collect.kubeapi import KubeApi

    return KubeApi(settings.connectors.kubernetes)


@main.group()
def watch() -> None:
    """Diagnose and store failed jobs as they end, without anyone asking."""


@watch.command("kueue")
@click.option("--cluster", default=None, help="The cluster's name in the store (default: `cluster:` of the config).")
@click.option("--api-server", default=None, metavar="URL",
              help="Kubernetes API server (default: connectors.kubernetes.api_server, the pod's service account, "
                   "or kubeconfig).")
@click.option("--max-watches", type=click.IntRange(1), default=None, metavar="N",
              help="Stop after N watch requests (default: run until stopped).")
@click.pass_context
def watch_kueue(ctx: click.Context, cluster: str | None, api_server: str | None, max_watches: int | None) -> None:
    """Watch Kueue Workloads; every run that ends failed (or evicted) is diagnosed like `diagnose
    --kueue-workload` and stored once, with its evidence. Resumes from its bookmark after a restart. SIGTERM or
    Ctrl-C: the runs in hand are finished and the bookmark saved."""
    from attribution.cli.db import open_store
    from attribution.watch.kueue import KueueWatcher

    settings = kube_settings(settings_of(ctx), cluster, api_server)
    rs = ruleset_of(ctx)
    api = open_api(settings)

    def stop_on_term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop_on_term)
    try:
        with open_store(ctx, settings=settings, application_name="attribution-watch") as engine:
            watcher = KueueWatcher(rs, engine, settings, api, settings.cluster)
            click.echo(f"attribution watch kueue: cluster {settings.cluster}", err=True)
            try:
                watcher.run(stop=(lambda: watcher.summary.watches >= max_watches) if max_watches else (lambda: False))
            except KeyboardInterrupt:
                click.echo("attribution watch kueue: stopping", err=True)
    finally:
        signal.signal(signal.SIGTERM, old)
        api.close()
    s = watcher.summary
    summary = ", ".join(f"{n} {o}" for o, n in sorted(s.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    click.echo(f"stored {sum(s.outcomes.values())} run(s)" + (f": {summary}" if summary else "")
               + f"; {s.lists} list(s), {s.watches} watch(es), {s.gone} expired")
    for e in s.errors[-10:]:
        click.echo(f"attribution: {e}", err=True)


def backfill_kueue_command(ctx: click.Context, since_t, until_t, redo: bool, cluster: str | None) -> None:
    """`attribution backfill --kueue`: the failed runs of [since, until) the API server still holds."""
    from attribution.cli.db import open_store
    from attribution.watch.kueue import backfill_kueue

    settings = kube_settings(settings_of(ctx), cluster, None)
    rs = ruleset_of(ctx)
    api = open_api(settings)
    try:
        with open_store(ctx, settings=settings) as engine:
            s = backfill_kueue(rs, engine, settings, api, settings.cluster, since_t, until_t, redo=redo,
                               progress=lambda r: click.echo(f"{r.end.ref} attempt {r.attempt}: "
                                                             f"{r.outcome or r.problem or 'already stored'}",
                                                             err=True))
    finally:
        api.close()
    summary = ", ".join(f"{n} {o}" for o, n in sorted(s.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    click.echo(f"{len(s.runs)} failed run(s) ended between {since_t:%Y-%m-%dT%H:%M:%SZ} and "
               f"{until_t:%Y-%m-%dT%H:%M:%SZ}" + (f": {summary}" if summary else ""))
    sys.stdout.flush()
