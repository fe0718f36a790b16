"""Unpacking a bundle on a Python without tarfile's extraction filters (3.11.0-3.11.3, Debian 12's 3.11.2): the
manual checks refuse what the "data" filter refuses, with the same words, and keep no set-uid bit or owner."""

from __future__ import annotations

import pytest

from attribution.errors import InputError
from attribution.scope import archive as archive_mod
from attribution.scope.archive import ArchiveLimits, unpack
from tests.scope.test_archive import archive

CASES = [
    ({"context.yaml": b"x", "../out": b"x"}, "outside the bundle"),
    ({"context.yaml": b"x", "l": ("symlink", "/etc/passwd")}, "absolute path"),
    ({"context.yaml": b"x", "l": ("symlink", "../../x")}, "a link that leads outside the bundle"),
    ({"context.yaml": b"x", "d": ("symlink", ".."), "d/evil": b"x"}, "outside the bundle"),
    ({"context.yaml": b"x", "h": ("hardlink", "../../etc/passwd")}, "outside the bundle"),
]


@pytest.fixture(params=[True, False], ids=["filters", "no-filters"])
def filters(request, monkeypatch):
    if request.param and not archive_mod.HAS_FILTERS:
        pytest.skip("this Python has no tarfile extraction filters (before 3.11.4)")
    monkeypatch.setattr(archive_mod, "HAS_FILTERS", request.param)
    return request.param


@pytest.mark.parametrize("members,problem", CASES)
def test_the_manual_checks_refuse_what_the_data_filter_refuses(tmp_path, filters, members, problem):
    with pytest.raises(InputError, match=problem):
        unpack(archive(members), tmp_path / "dest", ArchiveLimits())
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


def test_links_inside_are_kept_and_no_set_uid_bit_survives(tmp_path, filters):
    root = unpack(archive({"context.yaml": b"x", "nodes/n1/kern.log.1": b"line\n",
                           "nodes/n1/kernel.log": ("symlink", "kern.log.1"),
                           "nodes/n1/hard.log": ("hardlink", "nodes/n1/kern.log.1")}),
                  tmp_path / "a", ArchiveLimits())
    assert (root / "nodes/n1/kernel.log").read_text() == "line\n"
    assert (root / "nodes/n1/hard.log").read_text() == "line\n"
    assert not (root / "context.yaml").stat().st_mode & 0o6000
