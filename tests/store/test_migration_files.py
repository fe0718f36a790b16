"""The migration files' names follow their chain: sorted by name, each file's down_revision is the revision of the
file before it (revision ids are kept as they were, so every existing database still upgrades)."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from attribution.store.migrate import alembic_config, migrations_dir


def test_file_order_is_chain_order():
    script = ScriptDirectory.from_config(alembic_config())
    by_file = {rev.path.rsplit("/", 1)[-1]: rev for rev in script.walk_revisions()}
    names = sorted(by_file)
    assert names == sorted(p.name for p in (migrations_dir() / "versions").glob("*.py"))
    previous = None
    for name in names:
        rev = by_file[name]
        assert rev.down_revision == previous, f"{name}: down_revision {rev.down_revision}, the file before is {previous}"
        previous = rev.revision
    assert previous == script.get_current_head()


def test_one_head():
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1
