"""Kernel line prefixes of every format in docs/log-formats.md section 0, to UTC time and message."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from attribution.collect.kernel import KernelLineParser
from attribution.timeparse import YearGuesser, resolve_zone

UTC = timezone.utc
BOOT = datetime(2026, 3, 10, 0, 0, 0, tzinfo=UTC)
MSG = "NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus."


def _p(zone="UTC"):
    z = resolve_zone(zone)
    return KernelLineParser(zone=z, boot_time=BOOT,
                            years=YearGuesser(datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC), z))


@pytest.mark.parametrize("line,when,fmt", [
    (f"[ 1843.308145] {MSG}", "2026-03-10T00:30:43.308145", "dmesg"),
    (f"[   36.764462][  T291] {MSG}", "2026-03-10T00:00:36.764462", "dmesg"),
    (f"[Tue Mar 10 09:14:37 2026] {MSG}", "2026-03-10T09:14:37", "dmesg-T"),
    (f"[Tue Mar  3 09:14:37 2026] {MSG}", "2026-03-03T09:14:37", "dmesg-T"),
    (f"kern  :err   : 2026-03-10T10:34:54,859532+00:00 {MSG}", "2026-03-10T10:34:54.859532", "dmesg-iso"),
    (f"Mar 10 05:03:41 gpu-1 kernel: {MSG}", "2026-03-10T05:03:41", "syslog"),
    (f"Mar  2 11:38:47 worker4 kernel: [  219.470994] {MSG}", "2026-03-02T11:38:47", "syslog"),
    (f"2026-03-10T17:39:30+0000 host.svc kernel: {MSG}", "2026-03-10T17:39:30", "rfc3339"),
    (f"2026-03-10T15:55:06.218036+03:00 isaac-PO5 kernel: {MSG}", "2026-03-10T12:55:06.218036", "rfc3339"),
    (f"6,3964,206764307,-;{MSG}", "2026-03-10T00:03:26.764307", "kmsg"),
    (f"192.168.11.119: kern: warning: [2026-03-10T21:30:51.870495804Z]: {MSG}", "2026-03-10T21:30:51.870495", "talos"),
    (f"kernel: {MSG}", None, "bare"),
])
def test_prefix_formats(line, when, fmt):
    k = _p().parse(line)
    assert k.fmt == fmt
    assert k.text == MSG
    assert (k.time.isoformat() if k.time else None) == (when + "+00:00" if when else None)


def test_local_time_stamps_use_the_context_zone():
    k = _p("Asia/Tokyo").parse(f"Mar 10 18:00:00 g1 kernel: {MSG}")
    assert k.time == datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
    k = _p("+09:00").parse(f"[Tue Mar 10 18:00:00 2026] {MSG}")
    assert k.time == datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def test_year_less_stamp_near_new_year():
    z = resolve_zone("UTC")
    p = KernelLineParser(zone=z, years=YearGuesser(datetime(2027, 1, 1, 0, 10, tzinfo=UTC),
                                                   datetime(2027, 1, 1, 5, tzinfo=UTC), z))
    assert p.parse(f"Dec 31 23:58:00 g1 kernel: {MSG}").time.year == 2026
    assert p.parse(f"Jan  1 01:00:00 g1 kernel: {MSG}").time.year == 2027


def test_raw_dmesg_without_boot_time_has_no_time():
    assert KernelLineParser().parse(f"[ 12.5] {MSG}").time is None


def test_continuations_and_journal_markers():
    p = _p()
    p.parse(f"[ 1843.308145] {MSG}")
    c = p.parse("               NVRM: (PCI ID: 10de:26b5) installed in this system has")
    assert c.continuation and c.text.startswith("NVRM: (PCI ID")
    assert p.parse("-- Boot 4b9f0a3c5d6e47a1b2c3d4e5f60718a9 --").boot_marker
    assert p.parse("6,3965,206764308,c;continued").continuation
