"""The GPU counters through NVML (collect/nvml.py): the real pynvml module of nvidia-ml-py over a fake libnvidia-ml
(tests/harness/fakenvml.py), the listing it writes, the snapshot it becomes, the counter rules on it, and the
hooks with ATTRIBUTION_GPU_TOOL=nvml. Without nvidia-ml-py or without the driver: a coverage gap."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pynvml
import pytest

from attribution.collect.nvml import nvml_listing, parse_nvml_listing, read_nvml
from attribution.collect.telemetry import coverage_of, parse_nvidia_smi_xml, read_snapshot
from attribution.extract.counters import evaluate
from attribution.model import ExecutionContext

from tests.conftest import ROOT
from tests.harness import fakenvml
from tests.harness.fakenode import GPU_BUSES, SMI_TEMPLATE, FakeNode

UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("n1",), state="FAILED",
                       start=datetime(2026, 10, 1, 12, tzinfo=UTC), end=datetime(2026, 10, 1, 13, tzinfo=UTC))


@pytest.fixture
def node_gpus():
    gpus = [fakenvml.h100(i, b) for i, b in enumerate(GPU_BUSES)]
    yield gpus
    fakenvml.uninstall()


def _listing(gpus) -> str:
    nv, _ = fakenvml.install(gpus)
    return "".join(line + "\n" for line in read_nvml(nv))


def _snapshot(tmp: Path, phase: str, text: str):
    folder = tmp / phase
    folder.mkdir()
    (folder / "nvml.txt").write_text(text)
    return read_snapshot(folder, phase)


def test_the_module_under_test_is_nvidia_ml_py_itself():
    assert Path(pynvml.__file__).name == "pynvml.py" and "site-packages" in pynvml.__file__
    assert not (ROOT / "tests" / "harness" / "pynvml.py").exists()


def test_an_h100_reads_the_counters_nvidia_smi_gives_under_the_same_names(node_gpus):
    gpus, info, lost, notes, answered = parse_nvml_listing(_listing(node_gpus))
    assert answered and lost == () and notes == []
    assert sorted(gpus) == [f"0000:{b}:00" for b in sorted(GPU_BUSES)]
    smi, _ = parse_nvidia_smi_xml(SMI_TEMPLATE.read_text())
    one = next(iter(smi.values()))
    # what the R535 document holds for an H100, NVML holds too, with the same values for a fresh GPU
    common = set(one) & set(gpus["0000:1b:00"])
    assert {"ecc.volatile.dram_uncorrectable", "ecc.aggregate.dram_uncorrectable", "ecc.aggregate.dram_correctable",
            "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure",
            "pcie.replay_counter"} <= common
    assert {k: gpus["0000:1b:00"][k] for k in common} == {k: one[k] for k in common}
    assert info["0000:61:00"] == {"pci_bus_id": "00000000:61:00.0", "uuid": "GPU-5e0c1a2b-7d3f-4e8a-9b61-0c2d4e6f8a13",
                                  "serial": "1650823012343", "product": "NVIDIA H100 80GB HBM3", "index": "3",
                                  "driver": "535.183.01", "source": "nvml"}


def test_uncorrectable_errors_counted_through_nvml_are_the_same_cause(node_gpus, tmp_path):
    pro = _snapshot(tmp_path, "prolog", _listing(node_gpus))
    g = node_gpus[3]
    g.ecc[(1, 0, 2)] = g.ecc[(1, 1, 2)] = 2  # uncorrected, volatile/aggregate, DRAM
    g.remapped = (0, 1, 0, 0)
    epi = _snapshot(tmp_path, "epilog", _listing(node_gpus))
    assert pro.present == epi.present == ("nvidia-smi",)
    evs = evaluate_gpu(pro, epi)
    assert [(e.rule, e.kind, e.role, e.gpu) for e in evs] == [
        ("counters.gpu_remapped_rows_uncorrectable", "gpu_ecc_counter", "cause", "0000:61:00"),
        ("counters.gpu_uncorrectable_ecc", "gpu_ecc_counter", "cause", "0000:61:00")]


def evaluate_gpu(pro, epi):
    from attribution.rulepack.load import load_rules

    return sorted(evaluate(load_rules(), CTX, "n1", pro, epi), key=lambda e: e.rule)


def test_a_gpu_whose_handle_is_lost_at_the_epilog_vanished(node_gpus, tmp_path):
    pro = _snapshot(tmp_path, "prolog", _listing(node_gpus))
    node_gpus[3].handle_error = fakenvml.GPU_IS_LOST
    text = _listing(node_gpus)
    assert "lost #3 GPU is lost\n" in text
    epi = _snapshot(tmp_path, "epilog", text)
    assert len(epi.gpus) == 7 and any("GPU index 3 unreachable: GPU is lost" in p for p in epi.problems)
    assert [(e.kind, e.role, e.gpu) for e in evaluate_gpu(pro, epi)] == [("gpu_vanished", "cause", "0000:61:00")]


def test_a_device_lost_in_the_middle_of_its_queries_is_named(node_gpus, tmp_path):
    node_gpus[6].query_error = fakenvml.GPU_IS_LOST
    gpus, _, lost, _, _ = parse_nvml_listing(_listing(node_gpus))
    assert lost == () and "0000:d1:00" not in gpus  # its PCI id was not had either: `lost #6`
    node_gpus[6].query_error = fakenvml.SUCCESS
    nv, lib = fakenvml.install(node_gpus)
    real = lib.nvmlDeviceGetPcieReplayCounter
    lib.nvmlDeviceGetPcieReplayCounter = lambda h, v: fakenvml.GPU_IS_LOST if lib._gpu(h).minor == 6 else real(h, v)
    gpus, _, lost, _, _ = parse_nvml_listing("".join(x + "\n" for x in read_nvml(nv)))
    assert lost == ("0000:d1:00",) and "0000:d1:00" not in gpus


def test_a_v100_counts_single_and_double_bit_totals_and_has_no_remapped_rows(tmp_path):
    try:
        gpus, _, _, notes, _ = parse_nvml_listing(_listing([fakenvml.v100(0, "1b")]))
    finally:
        fakenvml.uninstall()
    assert sorted(gpus["0000:1b:00"]) == [
        "ecc.aggregate.double_bit_total", "ecc.aggregate.single_bit_total", "ecc.volatile.double_bit_total",
        "ecc.volatile.single_bit_total", "pcie.replay_counter", "retired_pages.double_bit", "retired_pages.pending",
        "retired_pages.single_bit"]
    assert notes == []  # unsupported is absent, not a problem


def test_without_the_driver_library_or_without_nvidia_ml_py_it_is_a_gap(tmp_path, monkeypatch):
    fakenvml.uninstall()  # the real module, looking for libnvidia-ml.so.1 (there is none here)
    lines = nvml_listing()
    assert lines == ["note NVML unavailable: NVML Shared Library Not Found"]
    snap = _snapshot(tmp_path, "epilog", "".join(x + "\n" for x in lines))
    assert snap.present == () and snap.gpus == {}
    cov = coverage_of("n1", None, snap, "x")
    assert "epilog snapshot has no nvidia-smi counters" in cov.notes
    assert any("NVML Shared Library Not Found" in n for n in cov.notes) and cov.status == "empty"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert nvml_listing() == ["note nvidia-ml-py is not installed (pip install nvidia-ml-py): no NVML counters"]


def test_the_hooks_with_the_nvml_tool_snapshot_compare_and_see_a_lost_gpu(tmp_path):
    """hooks/lib.sh with ATTRIBUTION_GPU_TOOL=nvml runs `$ATTRIBUTION_BIN nvml-snapshot`: here the node agent
    over the fake library. An unchanged node compares equal; a lost GPU changes the key."""
    node = FakeNode(tmp_path / "root")
    spec = tmp_path / "gpus.json"
    bin_ = tmp_path / "attribution"
    bin_.write_text(f"#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m tests.harness.fakenvml {spec} \"$@\"\n")
    bin_.chmod(0o755)
    lib = ROOT / "hooks" / "lib.sh"
    env = {"ATTRIBUTION_HOOK_ENV": "/nonexistent", "ATTRIBUTION_SYSFS_ROOT": str(node.root),
           "ATTRIBUTION_GPU_TOOL": "nvml", "ATTRIBUTION_BIN": str(bin_), "ATTRIBUTION_LOG": str(tmp_path / "h.log")}

    def snap(folder: Path, gpus: list[dict]) -> None:
        spec.write_text(json.dumps(gpus))
        r = subprocess.run(["/bin/bash", "-c", f'. "{lib}" && attribution_snapshot "$0" epilog', str(folder)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr

    fresh = [{"bus": b} for b in GPU_BUSES]
    snap(tmp_path / "a", fresh)
    snap(tmp_path / "b", fresh)
    assert (tmp_path / "a" / "counters.key").read_text() == (tmp_path / "b" / "counters.key").read_text()
    assert (tmp_path / "a" / "counters.key").read_text().count("\ngpu 0000:61:00 ") == 17
    assert not (tmp_path / "a" / "nvidia-smi.xml").exists()
    lost = [dict(g, handle_error=15) if i == 3 else g for i, g in enumerate(fresh)]
    snap(tmp_path / "c", lost)
    assert (tmp_path / "a" / "counters.key").read_text() != (tmp_path / "c" / "counters.key").read_text()
    pro, epi = read_snapshot(tmp_path / "a", "prolog"), read_snapshot(tmp_path / "c", "epilog")
    assert [(e.kind, e.gpu) for e in evaluate_gpu(pro, epi)] == [("gpu_vanished", "0000:61:00")]
