"""collect/live: a node's own logs are read bounded in bytes as well as in time (issue 18: every reader bounded),
and a cut read says so in its coverage."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from attribution.collect import live
from attribution.collect.nodelogs import NodeLogSpec
from attribution.scope.bundle import parse_context

UTC = timezone.utc
NOW = datetime.now(UTC).replace(microsecond=0)
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd and some padding to make lines longer\n"


def _ctx():
    return parse_context(json.dumps({"cluster": "c", "job_id": "1", "nodes": ["n1"],
                                     "start": (NOW - timedelta(hours=1)).isoformat(), "end": NOW.isoformat()}))


def _xid(bus: str) -> str:
    stamp = (NOW - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S.000000+00:00")
    return f"{stamp} n1 kernel: NVRM: Xid (PCI:0000:{bus}:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


def _log(tmp_path, parts: list[str]):
    p = tmp_path / "kern.log"
    p.write_text("".join(parts))
    return p


def test_from_the_job_start_at_most_max_bytes_are_read_and_the_cut_is_noted(ruleset, tmp_path):
    before = NOISE * 100
    path = _log(tmp_path, [before, _xid("3b"), NOISE * 2000, _xid("5e")])
    spec = NodeLogSpec("kernel", "n1", str(path))
    obs, cov = live.read_file(path, spec, _ctx(), ruleset.prefilter("kernel"), offset=len(before),
                              max_bytes=64 * 1024)
    assert [o.line.split("PCI:")[1][:10] for o in obs] == ["0000:3b:00"]  # the earliest fault, not the late one
    assert cov.status == "ok"
    assert any(f"read only {64 * 1024} bytes of" in n for n in cov.notes), cov.notes
    full, cov2 = live.read_file(path, spec, _ctx(), ruleset.prefilter("kernel"), offset=len(before),
                                max_bytes=64 * 1024 * 1024)
    assert len(full) == 2 and not any("read only" in n for n in cov2.notes)


def test_without_a_start_offset_the_last_max_bytes_are_read(ruleset, tmp_path):
    path = _log(tmp_path, [_xid("3b"), NOISE * 2000, _xid("5e")])
    obs, cov = live.read_file(path, NodeLogSpec("kernel", "n1", str(path)), _ctx(), ruleset.prefilter("kernel"),
                              offset=0, max_bytes=64 * 1024)
    assert [o.line.split("PCI:")[1][:10] for o in obs] == ["0000:5e:00"]
    assert any("no job-start offset: read the last 65536 bytes" in n for n in cov.notes), cov.notes


def test_a_command_that_never_stops_writing_is_cut_at_max_bytes():
    # `yes` writes forever: it returns (no TimeoutExpired) because the reader stops it at the bound
    out, err, rc, cut = live._bounded_run(["/usr/bin/yes", "NVRM: Xid"], timeout=60, max_bytes=5 * 1024 * 1024)
    assert cut and len(out) == 5 * 1024 * 1024 and out.startswith(b"NVRM: Xid\n")
    out, err, rc, cut = live._bounded_run(["/bin/sh", "-c", "echo hi; echo oops >&2; exit 3"], 60, 1024)
    assert (out, err, rc, cut) == (b"hi\n", b"oops\n", 3, False)
