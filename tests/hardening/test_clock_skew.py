"""Clock skew: a node whose clock is up to 30 s off still gets the right root cause (docs/clock-skew.md).

Every labelled bundle (tests/incidents, tests/cases) is copied; one node's kernel log has every time stamp moved by
+30 s or -30 s, each line in its own format (the kernel line parser says which prefix a line has; the stamp is
rewritten in place and the line parsed again to prove the rewrite moved its time by exactly the skew and changed
nothing else). The verdict's outcome, root cause kind and node, and culprits must stay as expected.yaml says.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from attribution.collect.kernel import KernelLineParser
from attribution.correlate.rootcause import job_window
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict
from attribution.scope.bundle import load_context
from attribution.timeparse import YearGuesser, resolve_zone

from tests.conftest import CASES, INCIDENTS, bundles

SKEW = 30  # seconds; rules/causal-graph.yaml clock_skew_seconds

# The stamp of each prefix format, as a span to rewrite (the parser has already said which format the line has).
_UPTIME = {
    "dmesg": re.compile(r"^\[\s*(\d+\.\d+)\]"),
    "bare": re.compile(r"^kernel: \[\s*(\d+\.\d+)\]"),
    "kmsg": re.compile(r"^\d+,\d+,(\d+),"),
}
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)([T ])(\d\d):(\d\d):(\d\d)([.,]\d+)?(Z|[+-]\d\d:?\d\d)?")
_ISO_AT = {
    "dmesg-iso": re.compile(r"^[a-z]+\s*:[a-z]+\s*: "),
    "rfc3339": re.compile(r"^"),
    "talos": re.compile(r"^\S+: [a-z]+: +[a-z]+: \["),
}
_CTIME = re.compile(r"^\[(?:([A-Z][a-z]{2}) )?([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d) (\d{4})\]")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(\.\d+)? ")


class Unshiftable(Exception):
    """A relative stamp that would become negative (a boot message within the first `skew` seconds)."""


def _shift_uptime(line: str, m: re.Match, delta: float) -> str:
    old = m.group(1)
    if m.re is _UPTIME["kmsg"]:
        new = int(old) + int(delta * 1_000_000)
        if new < 0:
            raise Unshiftable(line)
        return line[:m.start(1)] + str(new) + line[m.end(1):]
    decimals = len(old.split(".")[1])
    new = float(old) + delta
    if new < 0:
        raise Unshiftable(line)
    text = f"{new:.{decimals}f}"
    return line[:m.start(1)] + text.rjust(len(old)) + line[m.end(1):]


def _shift_iso(line: str, start: int, delta: timedelta) -> str:
    m = _ISO.match(line, start)
    assert m, line
    y, mo, d, sep, h, mi, s, frac, off = m.groups()
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    t = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro) + delta
    out = t.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    if frac:
        out += frac[0] + f"{t.microsecond:06d}"[: len(frac) - 1].ljust(len(frac) - 1, "0")
    return line[:m.start()] + out + (off or "") + line[m.end():]


def shift_line(line: str, fmt: str | None, delta: float, parsed_time: datetime | None, zone) -> str:
    """`line` with its stamp moved by `delta` seconds, written in the line's own format."""
    if fmt in _UPTIME:
        m = _UPTIME[fmt].match(line)
        if m is None:  # 'bare' without a printk stamp has no time at all
            return line
        return _shift_uptime(line, m, delta)
    td = timedelta(seconds=delta)
    if fmt in _ISO_AT:
        return _shift_iso(line, _ISO_AT[fmt].match(line).end(), td)
    if fmt == "dmesg-T":
        m = _CTIME.match(line)
        wd, mon, day, hms, year = m.groups()
        t = datetime.strptime(f"{mon} {day} {year} {hms}", "%b %d %Y %H:%M:%S") + td
        stamp = (t.strftime("%a ") if wd else "") + f"{t.strftime('%b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}"
        return "[" + stamp + "]" + line[m.end():]
    if fmt == "syslog":
        m = _SYSLOG.match(line)
        local = (parsed_time + td).astimezone(zone)
        frac = m.group(6)
        stamp = f"{local.strftime('%b')} {local.day:2d} {local.strftime('%H:%M:%S')}"
        if frac:
            stamp += "." + f"{local.microsecond:06d}"[: len(frac) - 1].ljust(len(frac) - 1, "0")
        return stamp + " " + line[m.end():]
    assert fmt is None, f"no rewriter for format {fmt}"
    return line


def shift_kernel_log(path: Path, node: str, bundle: Path, delta: float) -> int:
    """Rewrite every stamp of one node's kernel log; returns how many lines moved. Checks each rewrite."""
    ctx = load_context(bundle / "context.yaml")
    zone = resolve_zone(ctx.timezone)
    lo, hi = job_window(ctx, _graph())

    def parser():
        return KernelLineParser(zone=zone, boot_time=ctx.boot_time.get(node),
                                years=YearGuesser(ctx.start, ctx.end, zone))

    before, after = parser(), parser()
    raw = path.read_bytes().decode("utf-8", errors="surrogateescape")
    out, moved = [], 0
    for line in raw.split("\n"):
        p = before.parse(line)
        try:
            new = shift_line(line, p.fmt, delta, p.time, zone)
        except Unshiftable:
            # boot messages of the first seconds after boot: they cannot be moved earlier than the boot itself
            assert p.time is None or lo is None or p.time < lo, line
            new = line
        q = after.parse(new)
        assert (q.fmt, q.text) == (p.fmt, p.text), (line, new)
        if new != line:
            moved += 1
            if p.time is not None:
                assert q.time - p.time == timedelta(seconds=delta), (line, new)
            if p.uptime is not None and p.fmt in _UPTIME:
                assert abs(q.uptime - p.uptime - delta) < 1e-6, (line, new)
        out.append(new)
    path.write_bytes("\n".join(out).encode("utf-8", errors="surrogateescape"))
    return moved


_FM = re.compile(r"^\[([A-Z][a-z]{2}) +(\d{1,2}) (\d{4}) (\d\d:\d\d:\d\d)\] ")


def shift_fabricmanager_log(path: Path, bundle: Path, delta: float) -> int:
    """The same for a Fabric Manager log (its own `[Mon DD YYYY HH:MM:SS]` prefix, or a syslog prefix)."""
    from attribution.collect.fabricmanager import FabricManagerLineParser

    ctx = load_context(bundle / "context.yaml")
    zone = resolve_zone(ctx.timezone)
    years = YearGuesser(ctx.start, ctx.end, zone)
    before, after = FabricManagerLineParser(zone, years), FabricManagerLineParser(zone, years)
    sniff = KernelLineParser(zone=zone, years=years)
    out, moved = [], 0
    for line in path.read_text().split("\n"):
        p = before.parse(line)
        m = _FM.match(line)
        if m:
            t = datetime.strptime(f"{m[1]} {m[2]} {m[3]} {m[4]}", "%b %d %Y %H:%M:%S") + timedelta(seconds=delta)
            new = "[" + t.strftime("%b %d %Y %H:%M:%S") + "] " + line[m.end():]
        elif p.time is not None:
            k = sniff.parse(line)
            new = shift_line(line, k.fmt, delta, k.time, zone)
        else:
            new = line
        q = after.parse(new)
        assert q.text == p.text and (p.time is None or q.time - p.time == timedelta(seconds=delta)), (line, new)
        moved += new != line
        out.append(new)
    path.write_text("\n".join(out))
    return moved


_GRAPH = {}


def _graph():
    if "g" not in _GRAPH:
        from attribution.rulepack.load import load_rules

        _GRAPH["g"] = load_rules().graph
    return _GRAPH["g"]


def _matches_expected(v: dict, expected: dict) -> list[str]:
    problems = []
    if v["outcome"] != expected["outcome"]:
        problems.append(f"outcome {v['outcome']} (expected {expected['outcome']})")
    got_culprits = sorted(c["node"] for c in v["culprits"])
    if got_culprits != sorted(expected.get("culprits") or []):
        problems.append(f"culprits {got_culprits} (expected {sorted(expected.get('culprits') or [])})")
    exp_root, got_root = expected.get("root_cause"), v["root_cause"]
    if exp_root is None:
        if got_root is not None:
            problems.append(f"root {got_root['kind']}@{got_root['node']} (expected none)")
    elif got_root is None:
        problems.append(f"no root (expected {exp_root['kind']})")
    elif got_root["kind"] != exp_root["kind"] or ("node" in exp_root and got_root["node"] != exp_root["node"]):
        problems.append(f"root {got_root['kind']}@{got_root['node']} (expected {exp_root['kind']}@"
                        f"{exp_root.get('node')})")
    return problems


def _scenarios():
    out = []
    for b in bundles(INCIDENTS) + bundles(CASES):
        nodes = sorted(p.parent.name for p in (b / "nodes").glob("*/kernel.log"))
        for node in nodes:
            for delta in (SKEW, -SKEW):
                out.append(pytest.param(b, node, delta, id=f"{b.parent.name}/{b.name}/{node}/{delta:+d}s"))
    return out


#: Scenarios where the expected verdict does not survive the skew, each analysed in docs/clock-skew.md
#: ("Known limits"). They stay here as strict xfails: the day the engine handles them, the marker must go.
KNOWN_LIMITS: dict[str, str] = {
    "cases/01-xid95-uncontained-ecc/lrc-h100-21/+30s":
        "window edge: the previous job's Xid 48 lies 28 s before the job window opens; +30 s puts it 2 s inside, "
        "where it is the earliest cause (docs/clock-skew.md, known limit 1)",
    "cases/09-illegal-address-xid13-app-bug/oak-h200-08/+30s":
        "one node, two clocks: only the kernel log moves, so the Xid 13 lands 28 s after the illegal-address error "
        "its own node's job output printed 1.8 s after it; the same-node tolerance is 1 s (known limit 2)",
}


@pytest.mark.parametrize("bundle,node,delta", _scenarios())
def test_a_node_clock_off_by_30_seconds_keeps_the_verdict(ruleset, tmp_path, bundle, node, delta, request):
    key = request.node.callspec.id
    if key in KNOWN_LIMITS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_LIMITS[key]))
    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    moved = shift_kernel_log(copy / "nodes" / node / "kernel.log", node, copy, delta)
    # nothing moved only where nothing can: a log of boot messages, all within the first |delta| seconds after boot
    assert moved > 0 or (delta < 0 and _boot_only(bundle / "nodes" / node / "kernel.log", -delta))
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    v = verdict_to_dict(diagnose_bundle(ruleset, copy).verdict)
    assert _matches_expected(v, expected) == [], v["explanation"]


def _boot_only(path: Path, seconds: float) -> bool:
    stamps = [KernelLineParser().parse(line).uptime for line in path.read_text(errors="replace").splitlines()]
    return all(u is None or u < seconds for u in stamps) and any(u is not None for u in stamps)


def test_the_tolerance_is_the_one_documented(ruleset):
    assert ruleset.graph.clock_skew_seconds == SKEW
    doc = (Path(__file__).resolve().parents[2] / "docs" / "clock-skew.md").read_text()
    assert f"clock_skew_seconds: {SKEW}" in doc


def test_the_rewriter_moves_each_format_exactly():
    """Every kernel prefix format of the bundles is rewritten (not silently left alone)."""
    from collections import Counter

    seen = Counter()
    for b in bundles(INCIDENTS) + bundles(CASES):
        for k in (b / "nodes").glob("*/kernel.log"):
            p = KernelLineParser()
            for line in k.read_text(errors="replace").splitlines():
                seen[p.parse(line).fmt] += 1
    assert {"dmesg", "dmesg-T", "dmesg-iso", "syslog", "rfc3339", "talos", "kmsg"} <= set(seen)


def _fm_scenarios():
    out = []
    for b in bundles(INCIDENTS) + bundles(CASES):
        for fm in sorted((b / "nodes").glob("*/fabricmanager.log")):
            for delta in (SKEW, -SKEW):
                out.append(pytest.param(b, fm.parent.name, delta,
                                        id=f"{b.parent.name}/{b.name}/{fm.parent.name}/{delta:+d}s"))
    return out


@pytest.mark.parametrize("bundle,node,delta", _fm_scenarios())
def test_a_whole_node_clock_off_by_30_seconds_kernel_and_fabric_manager(ruleset, tmp_path, bundle, node, delta):
    """The node's kernel and Fabric Manager logs move together (one clock), as on a real node."""
    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    assert shift_kernel_log(copy / "nodes" / node / "kernel.log", node, copy, delta) > 0
    assert shift_fabricmanager_log(copy / "nodes" / node / "fabricmanager.log", copy, delta) > 0
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    v = verdict_to_dict(diagnose_bundle(ruleset, copy).verdict)
    assert _matches_expected(v, expected) == [], v["explanation"]
