"""Kernel log line prefixes (docs/log-formats.md section 0), taken apart into time and message.

The same `NVRM: Xid ...` message arrives behind many prefixes: raw dmesg seconds since boot, `dmesg -T`,
`dmesg --time-format iso`, journalctl short and short-iso, syslog with or without the printk stamp,
rsyslog RFC 3339, /dev/kmsg records, Talos, or a bare `kernel:`. `KernelLineParser.parse` is pure.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo

from attribution.frozen import Value
from attribution.timeparse import MONTHS, UTC, TimeError, YearGuesser, as_utc, parse_iso

class LazyPattern:
    """A regex compiled on its first match: a node hook reads one log format, and compiles only what it tries."""

    __slots__ = ("_source", "_rx")

    def __init__(self, source: str) -> None:
        self._source = source
        self._rx = None

    def match(self, text: str):
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self._source)
        return rx.match(text)


# Each pattern is matched at the start of the line. Named groups: see KernelLineParser._build.
_KMSG = LazyPattern(r"^(?P<prio>\d{1,5}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),(?P<flag>[-+c])[^;]*;(?P<msg>.*)$")
_RAW = LazyPattern(r"^\[\s*(?P<sec>\d+\.\d+)\](?:\[\s*[TC]\d+\])?\s?(?P<msg>.*)$")
_CTIME = LazyPattern(
    r"^\[(?:[A-Z][a-z]{2} )?(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d) "
    r"(?P<year>\d{4})\]\s?(?P<msg>.*)$")
_ISO_DECODE = LazyPattern(
    r"^(?P<fac>[a-z]+)\s*:(?P<lvl>[a-z]+)\s*: (?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?) (?P<msg>.*)$")
_SYSLOG = LazyPattern(
    r"^(?P<mon>[A-Za-z][a-z]{2}) +(?P<day>\d{1,2}) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))? "
    r"(?P<host>\S+) (?P<tag>[^:\[\s]+)(?:\[\d+\])?: (?P<msg>.*)$")
_RFC3339 = LazyPattern(
    r"^(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) "
    r"(?P<host>\S+) (?P<tag>[^:\[\s]+)(?:\[\d+\])?: (?P<msg>.*)$")
_TALOS = LazyPattern(
    r"^(?P<host>\S+): (?P<fac>[a-z]+): +(?P<lvl>[a-z]+): \[(?P<iso>\d{4}-[^\]]+)\]: (?P<msg>.*)$")
_BARE = LazyPattern(r"^kernel: (?P<msg>.*)$")
# dmesg --time-format iso without --decode: "2024-04-29T14:55:41,679700+02:00 msg" (no facility, no host)
_ISO_PLAIN = LazyPattern(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.,]\d+(?:Z|[+-]\d\d:?\d\d)) (?P<msg>.*)$")
# journalctl -o short-full ("Tue 2024-02-13 19:30:00 CET host kernel: ...") and -o short-unix
# ("1707849000.123456 host kernel: ..."). A zone name other than UTC/GMT means the context's zone.
_JOURNAL_FULL = LazyPattern(
    r"^(?:[A-Z][a-z]{2} )?(?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?) "
    r"(?P<tz>[A-Z][A-Za-z]{1,5}|[+-]\d\d:?\d\d) (?P<host>\S+) (?P<tag>[^:\[\s]+)(?:\[\d+\])?: (?P<msg>.*)$")
_JOURNAL_UNIX = LazyPattern(
    r"^(?P<epoch>\d{9,10}(?:\.\d{1,9})?) (?P<host>\S+) (?P<tag>[^:\[\s]+)(?:\[\d+\])?: (?P<msg>.*)$")
# dmesg -H / --reltime: "[Feb13 19:30] msg" (strftime "%b%e %H:%M") once a minute, then "[  +0.000316] msg",
# each the time since the message before (so only the head lines can be placed in time).
_RELTIME_HEAD = LazyPattern(
    r"^\[(?P<mon>[A-Z][a-z]{2}) ?(?P<day>\d{1,2}) (?P<h>\d\d):(?P<m>\d\d)(?::(?P<s>\d\d))?\]\s?(?P<msg>.*)$")
_RELTIME_DELTA = LazyPattern(r"^\[\s*\+(?P<delta>\d+\.\d+)\]\s?(?P<msg>.*)$")
_PRINTK = LazyPattern(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?")
_JOURNAL_MARK = LazyPattern(r"^-- (?:Boot [0-9a-f]+|Reboot|Logs begin|Journal begins|No entries)")

#: no machine has been up for a century: a longer uptime stamp is corruption, and gets no time
MAX_UPTIME_SECONDS = 100 * 366 * 86400
FORMATS = ("kmsg", "dmesg", "dmesg-T", "dmesg-H", "dmesg-iso", "syslog", "rfc3339", "journal-full", "journal-unix",
           "talos", "bare")


class KernelLine(Value):
    """One kernel log line with its prefix (dmesg, syslog, journald, kmsg) taken apart."""

    text: str  # the message after the prefix
    time: datetime | None
    host: str | None = None
    tag: str | None = None
    fmt: str | None = None  # which prefix was recognised; None for a continuation or unprefixed line
    continuation: bool = False  # an indented dmesg continuation, or a /dev/kmsg 'c' record
    boot_marker: bool = False
    uptime: float | None = None  # seconds since boot, for raw dmesg / kmsg

    def __init__(self, text: str, time: datetime | None, host: str | None = None, tag: str | None = None,
                 fmt: str | None = None, continuation: bool = False, boot_marker: bool = False,
                 uptime: float | None = None) -> None:
        # one per flagged line: written out (attribution.frozen; tests/test_frozen.py checks it against the fields)
        put = object.__setattr__
        put(self, "text", text)
        put(self, "time", time)
        put(self, "host", host)
        put(self, "tag", tag)
        put(self, "fmt", fmt)
        put(self, "continuation", continuation)
        put(self, "boot_marker", boot_marker)
        put(self, "uptime", uptime)


class KernelLineParser:
    """Takes kernel log lines apart. Remembers the last format seen, which is nearly always the next one."""

    def __init__(self, zone: tzinfo = UTC, boot_time: datetime | None = None,
                 years: YearGuesser | None = None) -> None:
        self.zone = zone
        self.boot_time = boot_time
        self.years = years or YearGuesser(None, None, zone)
        self._order = [self._kmsg, self._rfc3339, self._syslog, self._ctime, self._raw, self._iso_decode,
                       self._iso_plain, self._journal_full, self._journal_unix, self._talos, self._reltime,
                       self._bare]
        self._last = None

    def parse(self, line: str) -> KernelLine:
        if self._last is not None:
            r = self._last(line)
            if r is not None:
                return r
        if not line or line[0] in " \t":
            return KernelLine(text=line.strip(), time=None, continuation=bool(line.strip()))
        if _JOURNAL_MARK.match(line):
            return KernelLine(text=line, time=None, boot_marker=True)
        for fn in self._order:
            r = fn(line)
            if r is not None:
                self._last = fn
                return r
        return KernelLine(text=line.strip(), time=None)

    # -- one method per prefix format ---------------------------------------------------------------
    def _since_boot(self, seconds: float) -> datetime | None:
        """The wall time of an uptime stamp; None without a boot time or for an uptime no machine has (a
        corrupted stamp of absurd length must not end the read)."""
        if self.boot_time is None or not 0 <= seconds <= MAX_UPTIME_SECONDS:
            return None
        try:
            return self.boot_time + timedelta(seconds=seconds)
        except OverflowError:  # a boot time near datetime.max
            return None

    def _kmsg(self, line: str) -> KernelLine | None:
        m = _KMSG.match(line)
        if not m:
            return None
        sec = int(m["usec"]) / 1e6
        return KernelLine(text=m["msg"], time=self._since_boot(sec), fmt="kmsg",
                          continuation=m["flag"] == "c", uptime=sec)

    def _raw(self, line: str) -> KernelLine | None:
        m = _RAW.match(line)
        if not m:
            return None
        sec = float(m["sec"])
        return KernelLine(text=m["msg"], time=self._since_boot(sec), fmt="dmesg", uptime=sec)

    def _ctime(self, line: str) -> KernelLine | None:
        m = _CTIME.match(line)
        if not m:
            return None
        mon = MONTHS.get(m["mon"].lower())
        if mon is None:
            return None
        try:
            t = as_utc(datetime(int(m["year"]), mon, int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"])),
                       self.zone)
        except ValueError:
            t = None
        return KernelLine(text=m["msg"], time=t, fmt="dmesg-T")

    def _reltime(self, line: str) -> KernelLine | None:
        # A delta is relative to the message before, which the reader may not have seen (it parses only the
        # lines the prefilter hits): a delta line gets no time rather than a wrong one.
        m = _RELTIME_DELTA.match(line)
        if m:
            return KernelLine(text=m["msg"], time=None, fmt="dmesg-H")
        m = _RELTIME_HEAD.match(line)
        if not m:
            return None
        mon = MONTHS.get(m["mon"].lower())
        if mon is None:
            return None
        t = self.years.place(mon, int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"] or 0))
        return KernelLine(text=m["msg"], time=t, fmt="dmesg-H")

    def _iso_plain(self, line: str) -> KernelLine | None:
        m = _ISO_PLAIN.match(line)
        if not m:
            return None
        return KernelLine(text=m["msg"], time=self._iso(m["iso"]), fmt="dmesg-iso")

    def _journal_full(self, line: str) -> KernelLine | None:
        m = _JOURNAL_FULL.match(line)
        if not m:
            return None
        tz = m["tz"]
        stamp = f"{m['date']}T{m['time']}"
        if tz in ("UTC", "GMT", "Z"):
            stamp += "Z"
        elif tz[0] in "+-":
            stamp += tz
        msg, up = _strip_printk(m["msg"])
        return KernelLine(text=msg, time=self._iso(stamp), host=m["host"], tag=m["tag"], fmt="journal-full",
                          uptime=up)

    def _journal_unix(self, line: str) -> KernelLine | None:
        m = _JOURNAL_UNIX.match(line)
        if not m:
            return None
        try:
            t = datetime.fromtimestamp(float(m["epoch"]), UTC)
        except (OverflowError, ValueError, OSError):
            t = None
        msg, up = _strip_printk(m["msg"])
        return KernelLine(text=msg, time=t, host=m["host"], tag=m["tag"], fmt="journal-unix", uptime=up)

    def _iso_decode(self, line: str) -> KernelLine | None:
        m = _ISO_DECODE.match(line)
        if not m:
            return None
        return KernelLine(text=m["msg"], time=self._iso(m["iso"]), fmt="dmesg-iso")

    def _syslog(self, line: str) -> KernelLine | None:
        m = _SYSLOG.match(line)
        if not m:
            return None
        mon = MONTHS.get(m["mon"].lower())
        if mon is None:
            return None
        micro = int((m["frac"] or "0")[:6].ljust(6, "0"))
        t = self.years.place(mon, int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"]), micro)
        msg, up = _strip_printk(m["msg"])
        return KernelLine(text=msg, time=t, host=m["host"], tag=m["tag"], fmt="syslog", uptime=up)

    def _rfc3339(self, line: str) -> KernelLine | None:
        m = _RFC3339.match(line)
        if not m:
            return None
        msg, up = _strip_printk(m["msg"])
        return KernelLine(text=msg, time=self._iso(m["iso"]), host=m["host"], tag=m["tag"], fmt="rfc3339",
                          uptime=up)

    def _talos(self, line: str) -> KernelLine | None:
        m = _TALOS.match(line)
        if not m:
            return None
        return KernelLine(text=m["msg"], time=self._iso(m["iso"]), host=m["host"], fmt="talos")

    def _bare(self, line: str) -> KernelLine | None:
        m = _BARE.match(line)
        if not m:
            return None
        msg, up = _strip_printk(m["msg"])
        return KernelLine(text=msg, time=self._since_boot(up) if up is not None else None, fmt="bare",
                          uptime=up)

    def _iso(self, s: str) -> datetime | None:
        try:
            return parse_iso(s, self.zone)
        except TimeError:
            return None


def _strip_printk(msg: str) -> tuple[str, float | None]:
    m = _PRINTK.match(msg)
    if not m:
        return msg, None
    return msg[m.end():], float(m["sec"])
