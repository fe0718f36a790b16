"""Alembic environment: every migration runs with statement and lock timeouts, under an advisory lock, so
any number of hosts may run `attribution db upgrade` at once (one migrates, the others wait and find it done)."""

from __future__ import annotations

import re

from alembic import context
from sqlalchemy import engine_from_config, pool, text

from attribution.store.models import SCHEMA, Base

config = context.config
target_metadata = Base.metadata
MIGRATION_LOCK = 7_261_432_001  # pg_advisory_lock key shared by every host migrating this database
#: Objects the migrations create that the models do not describe: monthly partitions of `events`, views.
_PARTITION = re.compile(r"^events_(p\d{6}|default)$")


def include_object(obj, name, type_, reflected, compare_to):
    if type_ == "table" and name and _PARTITION.match(name):
        return False
    # PostgreSQL keeps one copy of job_events' foreign key per partition of events
    if type_ == "foreign_key_constraint" and _PARTITION.match(getattr(obj.referred_table, "name", "") or ""):
        return False
    return True


def include_name(name, type_, parent_names):
    if type_ == "schema":
        return name == SCHEMA
    return True


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is None:
        connectable = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
                                         poolclass=pool.NullPool)
        with connectable.connect() as connection:
            _run(connection)
    else:
        _run(connectable)


def _run(connection) -> None:
    statement_timeout = config.attributes.get("statement_timeout_ms", 600000)
    lock_timeout = config.attributes.get("lock_timeout_ms", 30000)
    connection.execute(text(f"SET statement_timeout = {int(statement_timeout)}"))
    connection.execute(text(f"SET lock_timeout = {int(lock_timeout)}"))
    connection.execute(text("SET TIME ZONE 'UTC'"))
    connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
    try:
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
        connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            version_table_schema=SCHEMA,
            include_schemas=True,
            include_object=include_object,
            include_name=include_name,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run `attribution db upgrade`")
run_migrations_online()
