"""Odd identities in real logs: host names in another case, IP addresses as node names, one-node jobs.

docs/bundle.md "Which node a job-output line belongs to": a host name in the line (any case, maybe fully
qualified), ..., and rule 5: in a job that ran on exactly one node, untagged output belongs to that node.
"""

from __future__ import annotations

from attribution.extract.events import resolve_node
from attribution.model import ExecutionContext, Observation


def _ctx(*nodes: str) -> ExecutionContext:
    return ExecutionContext(cluster="c", job_id="1", nodes=tuple(nodes), tasks_per_node=4)


def _job_line(text: str = "RuntimeError: CUDA error: uncorrectable ECC error encountered",
              node: str | None = None) -> Observation:
    return Observation(source="job", node=node, location="job/out:1", text=text, line=text)


def test_host_names_are_case_insensitive():
    ctx = _ctx("orion-01-01", "orion-01-02")
    assert ctx.resolve_host("Orion-01-01") == "orion-01-01"  # srun's spelling in HAFS#101
    assert ctx.resolve_host("ORION-01-02.cluster") == "orion-01-02"
    assert ctx.resolve_host("orion-01-03") is None


def test_an_ip_address_is_a_whole_name():
    ctx = _ctx("192.168.11.119", "10")
    assert ctx.resolve_host("192.168.11.119") == "192.168.11.119"
    # an IP is not "first label 10 + domain": a peer address must not land on a node named "10"
    assert ctx.resolve_host("10.216.210.236") is None
    assert ctx.resolve_host("10.cluster.local") == "10"


def test_untagged_output_of_a_one_node_job_belongs_to_that_node():
    assert resolve_node(_ctx("dgk713"), _job_line(), {}) == "dgk713"


def test_untagged_output_of_a_multi_node_job_belongs_to_no_node():
    assert resolve_node(_ctx("a", "b"), _job_line(), {}) is None
    # a host name, a rank and the file still decide before the fallback
    assert resolve_node(_ctx("a", "b"), _job_line(node="b"), {}) == "b"
    assert resolve_node(_ctx("a", "b"), _job_line(), {"rank": "5"}) == "b"
    assert resolve_node(_ctx("a", "b"), _job_line(), {"host": "A"}) == "a"


def test_node_side_lines_keep_their_node():
    obs = Observation(source="kernel", node="n1", location="nodes/n1/kernel.log:1", text="x", line="x")
    assert resolve_node(_ctx("n9"), obs, {}) == "n1"


def test_journal_lines_with_a_lower_case_month_are_kernel_lines():
    """journalctl in some locales prints "sep 03" (CachyOS/linux-cachyos#1019); still the syslog form."""
    from datetime import UTC, datetime

    from attribution.collect.kernel import KernelLineParser
    from attribution.timeparse import YearGuesser

    start = datetime(2026, 9, 3, 13, 0, tzinfo=UTC)
    p = KernelLineParser(years=YearGuesser(start, start, UTC))
    k = p.parse("sep 03 13:25:15 cachyos kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  610.57.04")
    assert k.fmt == "syslog" and k.host == "cachyos" and k.tag == "kernel"
    assert k.time == datetime(2026, 9, 3, 13, 25, 15, tzinfo=UTC)
    assert k.text.startswith("NVRM: loading")
    # not a month: stays unparsed
    assert KernelLineParser().parse("abc 03 13:25:15 host kernel: x").fmt != "syslog"


def test_dmesg_human_format_places_relative_stamps_in_time():
    """`dmesg -H` prints "[Jan 2 10:04] msg" once a minute, then "[  +0.000316] msg" relative to the message
    before (rwth-i6/returnn#1486 pasted it): head lines are placed in time, delta lines keep their message."""
    from datetime import UTC, datetime, timedelta

    from attribution.collect.kernel import KernelLineParser
    from attribution.timeparse import YearGuesser

    start = datetime(2024, 1, 2, 9, 0, tzinfo=UTC)
    p = KernelLineParser(years=YearGuesser(start, start + timedelta(hours=3), UTC))
    lone = p.parse("[  +0.000316] pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0")
    assert lone.fmt == "dmesg-H" and lone.time is None and lone.text.startswith("pcieport")
    head = p.parse("[Jan 2 10:04] NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    assert head.fmt == "dmesg-H" and head.time == datetime(2024, 1, 2, 10, 4, tzinfo=UTC)
    assert head.text.startswith("NVRM: Xid")
    # a delta is relative to the line before, which a prefilter-driven reader may have skipped: no time
    d1 = p.parse("[  +0.500000] NVRM: GPU 0000:03:00.0: GPU has fallen off the bus.")
    assert d1.fmt == "dmesg-H" and d1.time is None and d1.text.startswith("NVRM: GPU")
    assert p.parse("[Feb13 19:30] x").time == datetime(2024, 2, 13, 19, 30, tzinfo=UTC)
    # the ctime form (with weekday, seconds and year) is still dmesg -T, not -H
    assert p.parse("[Sun Feb 23 16:24:18 2025] NVRM: x").fmt == "dmesg-T"


def test_journal_short_full_and_short_unix_lines():
    """journalctl -o short-full / -o short-unix prefixes (systemd journalctl(1) output modes)."""
    from datetime import UTC, datetime

    from attribution.collect.kernel import KernelLineParser
    from attribution.timeparse import resolve_zone

    p = KernelLineParser(zone=resolve_zone("Europe/Berlin"))
    k = p.parse("Tue 2024-02-13 19:30:00 CET gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert k.fmt == "journal-full" and k.host == "gpu7" and k.text.startswith("NVRM: Xid")
    assert k.time == datetime(2024, 2, 13, 18, 30, tzinfo=UTC)  # a zone name: the context's zone
    k = KernelLineParser().parse("Tue 2024-02-13 19:30:00.250000 UTC gpu7 kernel: NVRM: x")
    assert k.time == datetime(2024, 2, 13, 19, 30, 0, 250000, tzinfo=UTC)
    k = KernelLineParser().parse("1707852600.500000 gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert k.fmt == "journal-unix" and k.host == "gpu7"
    assert k.time == datetime(2024, 2, 13, 19, 30, 0, 500000, tzinfo=UTC)


def test_dmesg_iso_without_decode():
    """`dmesg --time-format iso` without --decode: no facility column (equinor/ert#7797 pasted it)."""
    from datetime import UTC, datetime

    from attribution.collect.kernel import KernelLineParser

    k = KernelLineParser().parse("2024-04-29T14:55:41,679700+02:00 Out of memory: Killed process 1440763 (perl) "
                                 "total-vm:87033376kB, anon-rss:60356340kB, file-rss:0kB, shmem-rss:0kB")
    assert k.fmt == "dmesg-iso" and k.text.startswith("Out of memory: Killed process 1440763")
    assert k.time == datetime(2024, 4, 29, 12, 55, 41, 679700, tzinfo=UTC)
    # an rsyslog RFC 3339 line (host and tag after the stamp) is still read as such
    r = KernelLineParser().parse("2026-06-01T15:55:06.218036+03:00 isaac kernel: NVRM: x")
    assert r.fmt == "rfc3339" and r.host == "isaac"
