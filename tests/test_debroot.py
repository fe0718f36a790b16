"""Tests for tests/harness/debroot.py that need no Slurm: a path inside the Debian root is looked up the way a
process chrooted there sees it. Debian's packages make `/usr/sbin/slurmctld` an absolute link to
`/etc/alternatives/slurmctld`; followed on the host it finds the host's Slurm or nothing (#32: `-m slurm24` failed on
a machine without host Slurm, "root lacks /usr/sbin/slurmctld")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness.debroot import RootBuildError, in_root
from tests.harness.slurm import _SLURM_BINARIES, SlurmCluster


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def _link(path: Path, target: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


@pytest.fixture
def debian_root(tmp_path):
    """A root laid out as the 24.11 root is: slurmctld and slurmd through /etc/alternatives, the rest plain files."""
    root = tmp_path / "root"
    for daemon in ("slurmctld", "slurmd"):
        _executable(root / f"usr/sbin/{daemon}-wlm")
        _link(root / f"etc/alternatives/{daemon}", f"/usr/sbin/{daemon}-wlm")
        _link(root / f"usr/sbin/{daemon}", f"/etc/alternatives/{daemon}")
    for b in _SLURM_BINARIES:
        if not (root / b.lstrip("/")).is_symlink():
            _executable(root / b.lstrip("/"))
    return root


def test_an_absolute_link_through_alternatives_resolves_inside_the_root(debian_root):
    assert in_root(debian_root, "/usr/sbin/slurmctld") == debian_root / "usr/sbin/slurmctld-wlm"
    assert in_root(debian_root, "/usr/bin/sbatch") == debian_root / "usr/bin/sbatch"


def test_the_cluster_finds_every_binary_of_the_root_whatever_the_host_holds(debian_root, tmp_path):
    cluster = SlurmCluster(tmp_path / "c", root=debian_root)
    assert cluster.missing_binaries() == []


def test_a_link_that_resolves_only_on_the_host_is_missing_in_the_root(debian_root, tmp_path):
    """The host has /bin/sh; the root does not: a root whose slurmd points there lacks slurmd."""
    assert os.access("/bin/sh", os.X_OK)
    (debian_root / "etc/alternatives/slurmd").unlink()
    _link(debian_root / "etc/alternatives/slurmd", "/bin/sh")
    cluster = SlurmCluster(tmp_path / "c", root=debian_root)
    assert cluster.missing_binaries() == ["/usr/sbin/slurmd"]
    assert in_root(debian_root, "/usr/sbin/slurmd") == debian_root / "bin/sh"


def test_relative_links_and_dotdot_stay_inside_the_root(tmp_path):
    root = tmp_path / "root"
    _executable(root / "bin/tool")
    _link(root / "usr/bin/tool", "../../../../../bin/tool")  # more `..` than there are folders
    _link(root / "usr/lib", "../opt/lib")  # a link to a folder, then the path goes on through it
    _executable(root / "opt/lib/x/run")
    assert in_root(root, "/usr/bin/tool") == root / "bin/tool"
    assert in_root(root, "usr/lib/x/run") == root / "opt/lib/x/run"
    assert in_root(root, "/usr/lib/../bin/tool") == root / "opt/bin/tool"  # `..` of the link's target, as Linux


def test_a_missing_path_resolves_as_far_as_it_goes(tmp_path):
    root = tmp_path / "root"
    _link(root / "usr/sbin/slurmctld", "/etc/alternatives/slurmctld")
    assert in_root(root, "/usr/sbin/slurmctld") == root / "etc/alternatives/slurmctld"
    assert not in_root(root, "/usr/sbin/slurmctld").exists()


def test_a_loop_of_links_is_an_error(tmp_path):
    root = tmp_path / "root"
    _link(root / "a", "/b")
    _link(root / "b", "/a")
    with pytest.raises(RootBuildError, match="symbolic links"):
        in_root(root, "/a")
