"""Commands that use the store: `db ...`, `ingest`, `demo`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path

import click

from attribution.cli import main, ruleset_of, settings_of


@contextlib.contextmanager
def _embedded_lease(pg):
    """Commands share the embedded server: each holds a shared lock while it works; the last one out stops the
    server, unless `attribution db start` asked to keep it running."""
    lease = pg.data_dir.with_name(pg.data_dir.name + ".users")
    lease.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lease, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another command still uses the server
        if not _keep_marker(pg).exists():
            pg.stop()
    finally:
        os.close(fd)


def _keep_marker(pg) -> Path:
    return pg.data_dir.with_name(pg.data_dir.name + ".keep")


@contextlib.contextmanager
def open_store(ctx: click.Context | None, auto_migrate: bool = True, pool_size: int | None = None,
               settings=None, application_name: str = "attribution", deadline: float | None = None):
    """An engine on the configured database, or on the embedded one (started for this command and stopped after
    the last command using it, unless `attribution db start` keeps it running)."""
    from attribution.store import db as storedb
    from attribution.store import migrate

    settings = settings or settings_of(ctx)
    lease = contextlib.nullcontext()
    if not settings.database.url:
        from attribution.store.embedded import EmbeddedPostgres

        lease = _embedded_lease(EmbeddedPostgres(settings.embedded_dir))
    with lease:
        target = storedb.resolve_target(settings)
        engine = storedb.make_engine(target, settings, pool_size=pool_size, application_name=application_name,
                                     deadline=deadline)
        try:
            if target.embedded and auto_migrate:
                migrate.upgrade(engine)
            yield engine
        finally:
            engine.dispose()


@main.group()
def db() -> None:
    """Database commands."""


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Migrate the database to the newest schema (safe from many hosts at once)."""
    from attribution.store import migrate
    from attribution.store.db import describe

    with open_store(ctx, auto_migrate=False) as engine:
        migrate.upgrade(engine)
        click.echo(f"{describe(engine.url)}: at revision {migrate.current(engine)}")


@db.command("status")
@click.pass_context
def db_status(ctx: click.Context) -> None:
    """Where the database is and which schema revision it has."""
    from attribution.store import migrate
    from attribution.store.db import describe

    with open_store(ctx, auto_migrate=False) as engine:
        click.echo(f"database  {describe(engine.url)}")
        click.echo(f"revision  {migrate.current(engine) or '(empty)'} (newest {migrate.head()})")


@db.command("start")
@click.pass_context
def db_start(ctx: click.Context) -> None:
    """Start the embedded database and leave it running (to connect psql or Grafana to it)."""
    from attribution.store.embedded import EmbeddedPostgres
    from attribution.store import migrate
    from attribution.store.db import Target, make_engine

    settings = settings_of(ctx)
    if settings.database.url:
        raise click.UsageError("a database url is configured; there is no embedded database to start")
    pg = EmbeddedPostgres(settings.embedded_dir)
    url = pg.ensure_running()
    _keep_marker(pg).touch()
    from sqlalchemy.engine import make_url

    engine = make_engine(Target(make_url(url), True), settings)
    migrate.upgrade(engine)
    engine.dispose()
    click.echo(url)


@db.command("stop")
@click.pass_context
def db_stop(ctx: click.Context) -> None:
    """Stop the embedded database."""
    from attribution.store.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(settings_of(ctx).embedded_dir)
    _keep_marker(pg).unlink(missing_ok=True)
    pg.stop()


@db.command("attribute-pending")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds (the rest stay pending).")
@click.pass_context
def db_attribute_pending(ctx: click.Context, timeout: float | None) -> None:
    """Compute the verdict of every job with evidence newer than its verdict (e.g. after an ingest was killed
    between storing and attributing); safe to run from a timer beside live ingests."""
    from attribution.pipeline import attribute_all_pending

    rs = ruleset_of(ctx)
    deadline = time.monotonic() + timeout if timeout else None
    with open_store(ctx) as engine:
        n = attribute_all_pending(rs, engine, deadline)
    click.echo(f"attributed {n} pending job(s)")


@main.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.pass_context
def ingest(ctx: click.Context, bundles: tuple[Path, ...]) -> None:
    """Diagnose and store incident bundles (idempotent: ingesting again adds nothing)."""
    from attribution.pipeline import ingest_bundle

    rs = ruleset_of(ctx)
    with open_store(ctx) as engine:
        for b in bundles:
            result, verdict = ingest_bundle(rs, engine, b)
            outcome = verdict.outcome if verdict else "(attributed by another process)"
            click.echo(f"{b}: {outcome:<16} {result.new_events:>5} new event(s), "
                       f"{'new verdict' if result.verdict_changed else 'verdict unchanged'}")


@main.command()
@click.option("--weeks", default=8, show_default=True, help="Weeks of generated fleet history.")
@click.option("--incidents", type=click.Path(path_type=Path), default=None,
              help="Folder of example incident bundles (default: tests/incidents of this checkout).")
@click.pass_context
def demo(ctx: click.Context, weeks: int, incidents: Path | None) -> None:
    """The main job end to end: migrate, ingest the example incidents and a generated fleet history, print the
    verdicts and a fleet summary."""
    from attribution.fleetgen import history, write_bundle
    from attribution.pipeline import ingest_bundle
    from attribution.cli import report

    rs = ruleset_of(ctx)
    folder = incidents or Path(__file__).resolve().parents[2] / "tests" / "incidents"
    examples = sorted(p for p in folder.iterdir() if (p / "context.yaml").is_file()) if folder.is_dir() else []
    t0 = time.monotonic()
    with open_store(ctx) as engine, tempfile.TemporaryDirectory(prefix="attribution-demo-") as tmp:
        click.echo(f"database: {engine.url.render_as_string(hide_password=True)}")
        click.echo(f"\n== {len(examples)} example incidents")
        for b in examples:
            _, v = ingest_bundle(rs, engine, b)
            if v is None:
                click.echo(f"{b.name:<32} (attributed by another process)")
                continue
            root = v.root_cause
            click.echo(f"{b.name:<32} {v.outcome:<16} {v.action:<16} "
                       f"{(root.kind + ' on ' + (root.node or '-')) if root else '-'}")
        jobs = history(weeks=weeks)
        click.echo(f"\n== generated history: {len(jobs)} jobs on a 64-node fleet over {weeks} weeks")
        for j in jobs:
            ingest_bundle(rs, engine, write_bundle(j, Path(tmp)))
        report.fleet_summary(engine, click.echo)
    click.echo(f"\ndone in {time.monotonic() - t0:.1f} s")
