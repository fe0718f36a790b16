"""Unpacking an uploaded bundle: links that stay inside are fine, everything that leaves the folder or exceeds
the limits is refused before it is written, and the bundle's folder is found at the top or one level down."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from attribution.scope.archive import ArchiveLimits, unpack
from attribution.errors import InputError


def archive(members: dict[str, bytes | tuple[str, str]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                info.mode = 0o4755
                tar.addfile(info, io.BytesIO(content))
    buf.seek(0)
    return buf


def test_the_bundle_folder_is_the_top_or_its_single_folder(tmp_path):
    assert unpack(archive({"context.yaml": b"x"}), tmp_path / "a", ArchiveLimits()) == tmp_path / "a"
    root = unpack(archive({"inc-1/context.yaml": b"x", "inc-1/job/out": b""}), tmp_path / "b", ArchiveLimits())
    assert root == tmp_path / "b" / "inc-1"


def test_links_inside_the_bundle_are_kept_and_set_uid_bits_dropped(tmp_path):
    root = unpack(archive({"context.yaml": b"x", "nodes/n1/kern.log.1": b"line\n",
                           "nodes/n1/kernel.log": ("symlink", "kern.log.1")}), tmp_path / "a", ArchiveLimits())
    assert (root / "nodes/n1/kernel.log").read_text() == "line\n"
    assert not (root / "context.yaml").stat().st_mode & 0o6000


@pytest.mark.parametrize("members,problem", [
    ({"context.yaml": b"x", "../out": b"x"}, "outside the bundle"),
    ({"context.yaml": b"x", "l": ("symlink", "/etc/passwd")}, "absolute path"),
    ({"context.yaml": b"x", "d": ("symlink", ".."), "d/evil": b"x"}, "outside the bundle"),
    ({"context.yaml": b"x", "h": ("hardlink", "../../etc/passwd")}, "outside the bundle"),
    ({f"f{i}": b"" for i in range(11)}, "more than 10 members"),
    ({"context.yaml": b"x" * 600, "big": b"y" * 600}, "more than 1000 bytes"),
    ({"notes.txt": b"x"}, "no context.yaml"),
])
def test_what_would_leave_the_folder_or_break_a_limit_is_refused(tmp_path, members, problem):
    dest = tmp_path / "dest"
    with pytest.raises(InputError, match=problem):
        unpack(archive(members), dest, ArchiveLimits(max_files=10, max_bytes=1000))
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


def test_a_gzip_bomb_stops_at_the_byte_limit_without_writing_it(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 64 * 1024 * 1024
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(buf.getvalue()) < 200 * 1024
    buf.seek(0)
    with pytest.raises(InputError, match="more than"):
        unpack(buf, tmp_path / "dest", ArchiveLimits(max_bytes=1024 * 1024))
    assert not (tmp_path / "dest" / "zeros").exists()


@pytest.mark.parametrize("data", [b"", b"plain text", b"\x1f\x8b\x08\x00garbage"])
def test_what_is_not_a_tar_gz_is_refused_as_input(tmp_path, data):
    with pytest.raises(InputError):
        unpack(io.BytesIO(data), Path(tmp_path / "dest"), ArchiveLimits())


def test_a_context_naming_an_absurd_number_of_nodes_is_refused_before_the_engine_expands_it(tmp_path):
    nodes = ", ".join('"n[1-60000]"' for _ in range(3)).encode()
    with pytest.raises(InputError, match="more than 100000 nodes"):
        unpack(archive({"context.yaml": b"cluster: c\njob_id: 1\nnodes: [" + nodes + b"]\n"}), tmp_path / "a",
               ArchiveLimits())
    with pytest.raises(InputError, match="larger than"):
        unpack(archive({"context.yaml": b"#" * 2000}), tmp_path / "b", ArchiveLimits(max_context_bytes=1000))
