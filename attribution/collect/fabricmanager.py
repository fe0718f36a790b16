"""NVIDIA Fabric Manager log lines: `[Mmm DD YYYY HH:MM:SS] [LEVEL] [tid N] message`.

Lines without that prefix continue the previous record (multi-line payloads). In journald the same messages
carry a syslog prefix (`nv-fabricmanager[1120]: ...`), which the kernel parser already understands.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from attribution.frozen import Value
from attribution.timeparse import MONTHS, UTC, YearGuesser, as_utc
from attribution.collect.kernel import KernelLineParser, LazyPattern

_FM = LazyPattern(
    r"^\[(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<year>\d{4}) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\] "
    r"\[(?P<level>[A-Z]+)\] \[tid \d+\] (?P<msg>.*)$")
_FM_NOTIME = LazyPattern(r"^\[(?P<level>[A-Z]+)\] \[tid \d+\] (?P<msg>.*)$")


class FMLine(Value):
    """One Fabric Manager log line with its timestamp and level taken apart."""

    text: str
    time: datetime | None
    level: str | None = None
    continuation: bool = False


class FabricManagerLineParser:
    def __init__(self, zone: tzinfo = UTC, years: YearGuesser | None = None) -> None:
        self.zone = zone
        self._syslog = KernelLineParser(zone=zone, years=years)

    def parse(self, line: str) -> FMLine:
        m = _FM.match(line)
        if m:
            mon = MONTHS.get(m["mon"].lower())
            t = None
            if mon:
                try:
                    t = as_utc(datetime(int(m["year"]), mon, int(m["day"]), int(m["h"]), int(m["m"]),
                                        int(m["s"])), self.zone)
                except ValueError:
                    t = None
            return FMLine(text=m["msg"], time=t, level=m["level"])
        m = _FM_NOTIME.match(line)
        if m:
            return FMLine(text=m["msg"], time=None, level=m["level"])
        k = self._syslog.parse(line)
        if k.fmt in ("syslog", "rfc3339"):
            return FMLine(text=k.text, time=k.time)
        return FMLine(text=line.strip(), time=None, continuation=True)
