"""Commands that use the store: `db ...`, `demo` (`ingest`: cli/ingest.py)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import click

from attribution import resources
from attribution.cli import main, ruleset_of, settings_of


@contextlib.contextmanager
def open_store(ctx: click.Context | None, auto_migrate: bool = True, pool_size: int | None = None,
               settings=None, application_name: str = "attribution", deadline: float | None = None):
    """store.open.open_store with the command's settings, and the rule pack's drain policy for an embedded
    database that has none."""
    from attribution.store.open import open_store as store_open

    with store_open(settings or settings_of(ctx), auto_migrate=auto_migrate, pool_size=pool_size,
                    application_name=application_name, deadline=deadline,
                    drain_policy=_drain_policy(ctx)) as engine:
        yield engine


def _drain_policy(ctx: click.Context | None):
    """The rule pack's drain policy, read when asked for; None without a command (no rule pack to read)."""
    if ctx is None:
        return None

    def policy():
        from attribution.drain.policy import load_policy

        return load_policy(ruleset_of(ctx))

    return policy


@main.group()
def db() -> None:
    """Database commands."""


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Migrate the database to the newest schema (safe from many hosts at once)."""
    from attribution.store import make_partitions_ahead, migrate
    from attribution.store.db import describe
    from attribution.store.open import ensure_drain_policy

    with open_store(ctx, auto_migrate=False) as engine:
        migrate.upgrade(engine)
        ensure_drain_policy(engine, _drain_policy(ctx))
        made = make_partitions_ahead(engine)
        click.echo(f"{describe(engine.url)}: at revision {migrate.current(engine)}"
                   + (f"; {made} event partition(s) made ahead" if made else ""))


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: database, revision, newest, kept_for_replay.")
@click.pass_context
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Where the database is and which schema revision it has."""
    import json

    from attribution.store import migrate
    from attribution.store.db import describe

    from attribution.store.evidence import evidence_size

    with open_store(ctx, auto_migrate=False) as engine:
        where, revision = describe(engine.url), migrate.current(engine)
        with engine.connect() as conn:
            size = evidence_size(conn)
    if as_json:
        click.echo(json.dumps({"database": where, "revision": revision, "newest": migrate.head(),
                               "kept_for_replay": size}, indent=2))
        return
    click.echo(f"database  {where}")
    click.echo(f"revision  {revision or '(empty)'} (newest {migrate.head()})")
    if size is not None:
        click.echo(f"kept for replay  {size['jobs']} job(s), {size['lines']} line(s), "
                   f"{size['raw_bytes'] / 1e6:.1f} MB ({size['stored_bytes'] / 1e6:.1f} MB compressed)")


@db.command("distribute")
@click.pass_context
def db_distribute(ctx: click.Context) -> None:
    """Shard the store over a Citus cluster (run on the coordinator after `db upgrade`; safe to run again).
    Refuses a server without Citus."""
    from attribution.store.distribute import distribute

    with open_store(ctx, auto_migrate=False) as engine:
        n = distribute(engine, click.echo)
    click.echo(f"{n} table(s) distributed now; the design is in docs/store.md")


@db.command("drop-events-month")
@click.argument("month")
@click.pass_context
def db_drop_events_month(ctx: click.Context, month: str) -> None:
    """Retention: drop the events of MONTH (YYYY-MM: its partition of events, its rows in the default partition)
    and their job links; the rollups and the verdicts keep the history."""
    from datetime import datetime

    from attribution.errors import InputError
    from attribution.store.retention import drop_event_month

    try:
        when = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise InputError(month, "not a month (expected YYYY-MM)") from None
    with open_store(ctx, auto_migrate=False) as engine:
        n = drop_event_month(engine, when)
    click.echo(f"{month}: dropped {n['events']} event(s), {n['job_events']} job link(s)")


@db.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="What ended or happened before this is removed: an age (180d, 26w) or a time (2026-01-01, "
                   "now-180d; docs/cli.md).")
@click.option("--batch", default=5000, show_default=True, help="Rows per delete transaction.")
@click.option("--lock-timeout", "lock_timeout", default=2.0, show_default=True,
              help="Seconds a month's detach may wait for its lock on events (then it is left for the next run).")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@click.pass_context
def db_prune(ctx: click.Context, older_than: str, batch: int, lock_timeout: float, as_json: bool) -> None:
    """Retention: drop the months of events before a cutoff and delete the jobs (with their verdicts, coverage,
    links, counters and kept evidence) that ended before it, in short transactions that never block ingest for
    long. Rollups, drain audit and resumes are kept. The default policy (hooks/systemd/attribution-prune.timer):
    weekly, --older-than 180d."""
    import json
    from datetime import datetime, timezone

    from attribution.cli.times import when
    from attribution.errors import InputError
    from attribution.store.retention import prune

    now = datetime.now(timezone.utc)
    cutoff = when("--older-than", older_than, now)  # an age (180d) is that long before now
    if cutoff > now:
        raise InputError(older_than, "the cutoff is in the future")
    if batch < 1:
        raise InputError(str(batch), "--batch must be a positive number")
    with open_store(ctx, auto_migrate=False) as engine:
        res = prune(engine, cutoff, batch=batch, lock_timeout_ms=int(lock_timeout * 1000),
                    progress=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(res.as_dict(), indent=2))
        return
    click.echo(f"before {cutoff:%Y-%m-%dT%H:%M:%SZ}: {len(res.months)} month(s) dropped, {res.events} event(s), "
               f"{res.job_links} job link(s), {res.jobs} job(s), {res.alert_keys} alert key(s), "
               f"{res.alert_deliveries} alert delivery(ies)"
               + (f"; left for the next run (events busy): {', '.join(res.months_left)}" if res.months_left else ""))


@db.command("redact")
@click.option("--batch", default=1000, show_default=True, help="Rows per transaction.")
@click.option("--dry-run", "dry_run", is_flag=True, help="Count what would be redacted; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_context
def db_redact(ctx: click.Context, batch: int, dry_run: bool, as_json: bool) -> None:
    """Apply the rule pack's redactions (rules/redactions.yaml) to what is already stored: events' lines,
    messages and fields, the lines kept for replay, the verdict documents. In batches, one transaction each; a
    second run changes nothing. Run it as the schema owner after a newer redaction pack (docs/security.md)."""
    import json

    from attribution.errors import InputError
    from attribution.extract import redact
    from attribution.store.redact import redact_stored

    if batch < 1:
        raise InputError(str(batch), "--batch must be a positive number")
    red = ruleset_of(ctx).redactions
    with open_store(ctx, auto_migrate=False) as engine:
        res = redact_stored(engine, lambda s: redact.redact_counted(red, s), lambda d: redact.redact_kept(red, d),
                            lambda d: redact.redact_document(red, d), batch=batch, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(res.as_dict(), indent=2))
        return
    verb = "would redact" if dry_run else "redacted"
    click.echo(f"events: {verb} {res.events.changed} of {res.events.rows} (fingerprints: "
               f"{res.fingerprints_updated} recomputed, {res.fingerprints_kept} kept)")
    click.echo(f"kept evidence: {verb} {res.evidence.changed} of {res.evidence.rows} job(s)")
    click.echo(f"verdicts: {verb} {res.verdicts.changed} of {res.verdicts.rows}")
    kinds = res.kinds()
    click.echo("spans: " + (", ".join(f"{k} {n}" for k, n in kinds.items()) if kinds else "none"))


@db.command("start")
@click.pass_context
def db_start(ctx: click.Context) -> None:
    """Start the embedded database and leave it running (to connect psql or Grafana to it)."""
    from attribution.store.embedded import EmbeddedPostgres
    from attribution.store import migrate
    from attribution.store.db import Target, make_engine

    settings = settings_of(ctx)
    from attribution.store.lease import keep_marker

    if settings.database.url:
        raise click.UsageError("a database url is configured; there is no embedded database to start")
    pg = EmbeddedPostgres(settings.embedded_dir)
    url = pg.ensure_running()
    keep_marker(pg).touch()
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
    from attribution.store.lease import keep_marker

    pg = EmbeddedPostgres(settings_of(ctx).embedded_dir)
    keep_marker(pg).unlink(missing_ok=True)
    pg.stop()


@db.command("attribute-pending")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds (the rest stay pending).")
@click.pass_context
def db_attribute_pending(ctx: click.Context, timeout: float | None) -> None:
    """Compute the verdict of every job with evidence newer than its verdict (e.g. after an ingest was killed
    between storing and attributing); safe to run from a timer beside live ingests."""
    from attribution.pipeline.ingest import attribute_all_pending
    from attribution.store import make_partitions_ahead

    rs = ruleset_of(ctx)
    deadline = time.monotonic() + timeout if timeout else None
    with open_store(ctx) as engine:
        make_partitions_ahead(engine)  # the timer's maintenance step: next year's partitions, before they are due
        n = attribute_all_pending(rs, engine, deadline)
    click.echo(f"attributed {n} pending job(s)")


@main.command()
@click.option("--weeks", default=8, show_default=True, help="Weeks of generated fleet history.")
@click.option("--incidents", type=click.Path(path_type=Path), default=None,
              help="Folder of example incident bundles (default: the example incidents shipped with attribution).")
@click.option("--fresh", is_flag=True, help="Start over: empty the embedded database first (never a configured one).")
@click.pass_context
def demo(ctx: click.Context, weeks: int, incidents: Path | None, fresh: bool) -> None:
    """The main job end to end: migrate, ingest the example incidents and a generated fleet history, print the
    verdicts and a fleet summary. Run again, it stores nothing new (the history is generated once)."""
    from sqlalchemy import text

    from attribution.errors import InputError
    from attribution.fleetgen import CLUSTER, history, write_bundle
    from attribution.pipeline.ingest import ingest_bundle
    from attribution.cli import report
    from attribution.store import migrate

    if fresh and settings_of(ctx).database.url:
        raise InputError("--fresh", "refusing to empty a configured database; --fresh starts over only on the "
                                    "embedded default")

    rs = ruleset_of(ctx)
    folder = incidents or resources.incidents_dir()
    examples = sorted(p for p in folder.iterdir() if (p / "context.yaml").is_file()) if folder.is_dir() else []
    t0 = time.monotonic()
    with open_store(ctx) as engine, tempfile.TemporaryDirectory(prefix="attribution-demo-") as tmp:
        click.echo(f"database: {engine.url.render_as_string(hide_password=True)}")
        if fresh:
            migrate.downgrade(engine, "base")
            migrate.upgrade(engine)
        click.echo(f"\n== {len(examples)} example incidents")
        for b in examples:
            _, v = ingest_bundle(rs, engine, b)
            if v is None:
                click.echo(f"{b.name:<32} (attributed by another process)")
                continue
            root = v.root_cause
            click.echo(f"{b.name:<32} {v.outcome:<16} {v.action:<16} "
                       f"{(root.kind + ' on ' + (root.node or '-')) if root else '-'}")
        with engine.connect() as c:
            generated = c.execute(text("SELECT count(*) FROM attribution.jobs WHERE cluster = :c"),
                                  {"c": CLUSTER}).scalar()
        if generated:
            click.echo(f"\n== generated history: already stored ({generated} jobs; --fresh starts over)")
        else:
            jobs = history(weeks=weeks)
            click.echo(f"\n== generated history: {len(jobs)} jobs on a 64-node fleet over {weeks} weeks")
            for j in jobs:
                ingest_bundle(rs, engine, write_bundle(j, Path(tmp)))
        report.fleet_summary(engine, click.echo)
    click.echo(f"\ndone in {time.monotonic() - t0:.1f} s")
