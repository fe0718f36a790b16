"""What an error-looking line is (rules/replay/error-lines.txt): the patterns, and the `!` patterns of the
informational levels that are never error-looking."""

from __future__ import annotations

import pytest

from attribution.rulepack.errorlines import error_line_patterns, informational_line_patterns
from attribution.rulepack.prefilter import Prefilter

from tests.conftest import ROOT


def _errorlike(rules_dir=None) -> Prefilter:
    return Prefilter(error_line_patterns(rules_dir), informational_line_patterns(rules_dir))


@pytest.mark.parametrize("line", [
    "seyun:17280:17553 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared "
    "object file: No such file or directory.",
    "e53b7da88fea:2493:2753 [0] NCCL INFO Failed to open libibverbs.so[.1]",
    "062fc37504b7:350:457 [0] INFO NET/IB : No device found. (failed)",
    "INFO: Function: ofi_init Line: 1076: NET/OFI Running on P4d platform, failed to read topology, using default",
    "libfabric:151205:1753871244::core:core:fi_getinfo_():1385<info> fi_getinfo: provider ofi_rxm returned -61 (No data available)",
    "[I ProcessGroupNCCL.cpp:835] [Rank 0] ProcessGroupNCCL initialized with following options: NCCL_BLOCKING_WAIT: 0 TIMEOUT(ms): 1800000",
    "[rank0]:[I1119 13:21:13.938073877 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] timeout 600000 ms",
])
def test_an_informational_level_is_not_error_looking(line):
    assert _errorlike().find(line.encode() + b"\n") == []


@pytest.mark.parametrize("line", [
    "ubuntu:39964:40044 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x7f6f18cb7f40",
    "seyun:17283:17549 [3] include/socket.h:371 WARN Connection closed by remote peer, fail",
    "E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: -6)",
    "INFO: task python:1234 blocked for more than 120 seconds; a hung task is an error",
    "[1496344648.548334] [vegas06:14879:0]      uct_iface.c:330  UCX  ERROR Error Endpoint timeout was not handled",
])
def test_warnings_and_errors_stay_error_looking(line):
    assert _errorlike().find(line.encode() + b"\n") != []


def test_a_pack_without_informational_lines_has_none(tmp_path):
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "error-lines.txt").write_text("# only errors\n\\berror\\b\n")
    assert error_line_patterns(tmp_path) == (r"(?i:\berror\b)",)
    assert informational_line_patterns(tmp_path) == ()
    assert informational_line_patterns(ROOT / "rules")  # the shipped pack has some
