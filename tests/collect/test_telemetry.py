"""Counter snapshots as real GPUs and NICs write them: every document of tests/data/telemetry/real parsed, checked
against the values read from it by hand (its README); parse_snapshot over {file name: text}; what the coverage
says could not be observed. Pure: no database, no Slurm."""

from __future__ import annotations

import shutil

import pytest

from attribution.collect.sysfs_counters import saturated
from attribution.collect.telemetry import (coverage_of, parse_snapshot, read_snapshot, snapshot_from_json,
                                           snapshot_to_json)

from tests.conftest import ROOT
from tests.harness.real_telemetry_cases import hooks_listing

REAL = ROOT / "tests" / "data" / "telemetry" / "real"
NA = object()  # the counter must be absent (the document prints N/A, or has no such element)

# folder: (GPU, driver, {counter: value read by hand, or NA}, words every coverage note about it must hold)
SMI = {
    "telegraf-a100-sxm4-v12": ("0000:01:00", "535.54.03", {
        "ecc.aggregate.sram_uncorrectable": 0, "ecc.aggregate.dram_uncorrectable": 0,
        "ecc.aggregate.dram_correctable": 0, "mig.3.ecc.volatile.sram_uncorrectable": 0,
        "mig.4.ecc.volatile.sram_uncorrectable": 0, "mig.5.ecc.volatile.sram_uncorrectable": 0,
        "mig.6.ecc.volatile.sram_uncorrectable": 0, "ecc.volatile.sram_uncorrectable": 0,
        "ecc.volatile.dram_uncorrectable": NA, "remapped_rows.uncorrectable": NA, "retired_pages.double_bit": NA,
        "pcie.replay_counter": 0, "reset.required": 0}, ["MIG on"]),
    "telegraf-a10g": ("0000:00:1e", "515.105.01", {
        "ecc.volatile.dram_uncorrectable": 0, "ecc.aggregate.sram_correctable": 0, "remapped_rows.correctable": 0,
        "remapped_rows.uncorrectable": 0, "remapped_rows.pending": 0, "remapped_rows.failure": 0,
        "retired_pages.double_bit": NA, "pcie.replay_counter": 0}, []),
    "telegraf-tesla-t4": ("0000:00:1e", "515.105.01", {
        "ecc.volatile.dram_uncorrectable": 0, "ecc.aggregate.dram_uncorrectable": 0, "retired_pages.double_bit": 0,
        "retired_pages.pending": 0, "remapped_rows.uncorrectable": NA, "pcie.replay_counter": 0}, []),
    "telegraf-gtx-1070-ti": ("0000:01:00", None, {"pcie.replay_counter": NA, "ecc.volatile.dram_uncorrectable": NA},
                             ["no ECC counts"]),
    "telegraf-gtx-1660-ti": ("0000:43:00", "418.43", {"pcie.replay_counter": 0, "ecc.volatile.dram_uncorrectable": NA,
                                                      "retired_pages.pending": NA}, ["no ECC counts"]),
    "telegraf-quadro-p400": ("0000:43:00", "418.43", {"pcie.replay_counter": 0, "ecc.aggregate.dram_correctable": NA},
                             ["no ECC counts"]),
    "telegraf-quadro-p2000-v12": ("0000:17:00", "525.125.06", {"pcie.replay_counter": 0,
                                                               "remapped_rows.uncorrectable": NA}, ["no ECC counts"]),
    "telegraf-rtx-3060-v12": ("0000:2d:00", "570.124.04", {
        "pcie.replay_counter": 0, "recovery_action.required": 0, "reset.required": NA,
        "reset.drain_and_reset_recommended": NA}, ["no ECC counts"]),
    "telegraf-rtx-3080-v12": ("0000:04:00", "536.40", {"reset.required": 0, "reset.drain_and_reset_recommended": NA,
                                                       "pcie.replay_counter": 0}, ["no ECC counts"]),
    "telegraf-rtx-3090-v12": ("0000:00:10", "525.147.05", {"pcie.replay_counter": 0}, ["no ECC counts"]),
    "telegraf-rtx-3080-v13": ("0000:0c:00", "595.58.03", {
        "repair.channel_pending": 0, "repair.tpc_pending": 0, "repair.unrepairable_memory": NA,
        "remapped_rows.uncorrectable": NA, "recovery_action.required": 0}, ["no ECC counts"]),
    "telegraf-rtx-4000-sff-ada-v13": ("0000:06:00", "595.84", {
        "repair.channel_pending": 0, "repair.tpc_pending": 0, "repair.unrepairable_memory": NA,
        "remapped_rows.correctable": 0, "remapped_rows.correctable_inactive": 0, "remapped_rows.uncorrectable": 0,
        "remapped_rows.uncorrectable_inactive": 0, "remapped_rows.pending": 0, "remapped_rows.failure": 0,
        "ecc.aggregate.dram_uncorrectable": NA, "recovery_action.required": 0}, ["ECC disabled"]),
}


def _smi(name: str) -> str:
    return (REAL / name / "nvidia-smi.xml").read_text()


def test_every_nvidia_smi_document_of_the_corpus_is_in_the_table():
    assert sorted(p.parent.name for p in REAL.glob("*/nvidia-smi.xml")) == sorted(SMI)


@pytest.mark.parametrize("name", sorted(SMI))
def test_a_real_nvidia_smi_document_gives_the_values_read_by_hand(name):
    gpu, driver, values, words = SMI[name]
    s = parse_snapshot({"nvidia-smi.xml": _smi(name)}, "epilog", name)
    assert s.present == ("nvidia-smi",) and s.problems == () and s.lost == () and s.messages == ()
    assert list(s.gpus) == [gpu]
    assert s.gpu_info[gpu].get("driver") == driver
    for counter, want in values.items():
        if want is NA:
            assert counter not in s.gpus[gpu], counter
        else:
            assert s.gpus[gpu][counter] == want, counter
    notes = [n for n in coverage_of("n1", s, s, "x").notes if n.startswith(f"GPU {gpu}")]
    assert len(notes) == len(words) and all(w in n for w, n in zip(words, notes)), notes
    cov = coverage_of("n1", s, s, "x")
    assert cov.status == ("missing" if words else "ok")


# -- sysfs trees: through the hooks' compact listing, and as the bundle's tree ---------------------------------

def test_gpud_h100_ports_a_saturated_link_downed_and_64_bit_data():
    s = parse_snapshot({"sysfs.txt": hooks_listing(REAL / "gpud-h100-infiniband")}, "epilog", "gpud")
    assert sorted(s.ports) == ["mlx5_0/1", "mlx5_1/1", "mlx5_4/1", "mlx5_5/1", "mlx5_6/1", "mlx5_7/1", "mlx5_8/1",
                               "mlx5_9/1", "mlx5_bond_0/1"]
    assert s.ports["mlx5_1/1"]["counters/link_downed"] == 255
    assert all(p["counters/port_rcv_errors"] == 14 for p in s.ports.values())
    assert {k: p["counters/port_rcv_switch_relay_errors"] for k, p in s.ports.items() if k != "mlx5_1/1"} == \
        dict.fromkeys(set(s.ports) - {"mlx5_1/1"}, 1) and s.ports["mlx5_1/1"]["counters/port_rcv_switch_relay_errors"] == 2
    assert s.ports["mlx5_0/1"]["counters/port_xmit_data"] == 230442669431839
    assert s.ports["mlx5_0/1"]["hw_counters/roce_adp_retrans"] == 3
    assert s.ports["mlx5_0/1"]["hw_counters/rx_write_requests"] == 3809045607
    assert saturated(s.ports["mlx5_1/1"]) == {"counters/link_downed": 8, "counters/excessive_buffer_overrun_errors": 4}
    assert saturated(s.ports["mlx5_0/1"]) == {"counters/excessive_buffer_overrun_errors": 4}  # 64-bit data: not


def test_node_exporter_mlx4_prefers_the_64_bit_forms_and_skips_no_pma():
    s = parse_snapshot({"sysfs.txt": hooks_listing(REAL / "node-exporter-sysfs")}, "epilog", "ne")
    assert sorted(s.ports) == ["mlx4_0/1", "mlx4_0/2"]  # i40iw0 printed "N/A (no PMA)" for every counter
    p1, p2 = s.ports["mlx4_0/1"], s.ports["mlx4_0/2"]
    assert p1["counters/port_xmit_wait"] == 4294967295 and p1["counters/port_xmit_discards"] == 5
    assert p1["counters_ext/port_xmit_data_64"] == 3733440 == p1["counters/port_xmit_data"]
    assert p2["counters_ext/port_rcv_data_64"] == 4631917 == p2["counters/port_rcv_data"]  # the file says 0
    assert saturated(p1) == {"counters/port_xmit_wait": 32} and saturated(p2) == {}
    assert dict(s.pci) == {"0000:01:00.0": {"aer_dev_fatal": 0, "aer_dev_nonfatal": 0},
                           "0000:45:00.0": {"aer_dev_fatal": 0, "aer_dev_nonfatal": 0}}


def test_procfs_hfi1_mlx4_mlx5_ports_and_aer():
    s = parse_snapshot({"sysfs.txt": hooks_listing(REAL / "procfs-sysfs")}, "epilog", "procfs")
    assert sorted(s.ports) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    assert s.ports["hfi1_0/1"]["counters/port_xmit_data"] == 273558326543
    assert s.ports["hfi1_0/1"]["counters/link_downed"] == 0 and s.ports["hfi1_0/1"]["counters/symbol_error"] == 0
    m5 = s.ports["mlx5_0/1"]
    assert (m5["hw_counters/req_cqe_error"], m5["hw_counters/local_ack_timeout_err"],
            m5["hw_counters/duplicate_request"], m5["hw_counters/resp_cqe_error"]) == (3481, 131, 41, 8109)
    assert s.ports["mlx4_0/1"]["counters/port_xmit_wait"] == 3599
    assert sorted(s.pci) == ["0000:00:03.0", "0000:01:00.0", "0000:03:00.0"]
    assert all(v == 0 for d in s.pci.values() for v in d.values())
    assert all(saturated(p) == {} for p in s.ports.values())


def test_the_bundle_tree_of_a_real_mlx4_reads_as_its_listing(tmp_path):
    src = REAL / "node-exporter-sysfs" / "sys" / "class" / "infiniband"
    for port in src.glob("*/ports/*"):
        shutil.copytree(port, tmp_path / "tree" / "infiniband" / port.parent.parent.name / port.name)
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "sysfs.txt").write_text(hooks_listing(REAL / "node-exporter-sysfs"))
    tree, listing = read_snapshot(tmp_path / "tree", "epilog"), read_snapshot(tmp_path / "list", "epilog")
    assert tree.ports == listing.ports


def test_saturated_watched_counters_are_coverage_notes_not_ok():
    listing = hooks_listing(REAL / "gpud-h100-infiniband")
    pro = parse_snapshot({"sysfs.txt": listing}, "prolog", "p")
    epi = parse_snapshot({"sysfs.txt": listing}, "epilog", "e")
    cov = coverage_of("n1", pro, epi, "x")
    assert cov.status == "missing"
    assert ("port mlx5_1/1 counters/link_downed at its 8-bit maximum 255 at the prolog: a change during the job "
            "could not be seen") in cov.notes
    assert sum("excessive_buffer_overrun_errors at its 4-bit maximum 15" in n for n in cov.notes) == 9
    assert not any("port_xmit_data" in n for n in cov.notes)  # 64-bit extended counters do not saturate here


# -- parse_snapshot: the files as text, what nvidia-smi printed beside its document ---------------------------

def test_no_files_is_no_snapshot_and_the_reader_gives_the_same_as_the_mapping(tmp_path):
    assert parse_snapshot({}, "prolog", "x") is None
    files = {"nvidia-smi.xml": _smi("telegraf-tesla-t4"), "sysfs.txt": hooks_listing(REAL / "procfs-sysfs")}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert read_snapshot(tmp_path, "epilog", "x") == parse_snapshot(files, "epilog", "x")


def test_an_inforom_warning_on_the_xml_stream_is_a_message_not_a_lost_document():
    warning = "WARNING: infoROM is corrupted at gpu 0000:04:00.0"
    for doc in (warning + "\n" + _smi("telegraf-rtx-3080-v12"), _smi("telegraf-rtx-3080-v12") + warning + "\n"):
        s = parse_snapshot({"nvidia-smi.xml": doc, "nvidia-smi.status": "14\n", "nvidia-smi.err": ""}, "epilog", "x")
        assert s.present == ("nvidia-smi",) and s.problems == () and s.lost == ()
        assert list(s.gpus) == ["0000:04:00"] and s.gpus["0000:04:00"]["reset.required"] == 0
        assert s.messages == (warning,)
        assert s.gaps == (f"nvidia-smi exited 14; its document was read: {warning}",)
        assert snapshot_from_json(snapshot_to_json(s)) == s


def test_no_devices_were_found_is_a_message_and_a_problem_naming_no_gpu():
    s = parse_snapshot({"nvidia-smi.xml": "No devices were found\n", "nvidia-smi.status": "6\n",
                        "nvidia-smi.err": ""}, "epilog", "x")
    assert s.present == () and s.lost == () and s.gpus == {}
    assert s.messages == ("No devices were found",)
    assert s.problems == ("x: nvidia-smi exited 6: No devices were found",)


def test_a_gpu_a_failed_run_names_beside_no_document_is_still_lost():
    msg = "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"
    s = parse_snapshot({"nvidia-smi.xml": "", "nvidia-smi.err": msg + "\n", "nvidia-smi.status": "15"}, "epilog", "x")
    assert s.lost == ("0000:03:00",) and s.messages == (msg,)


def test_a_vgpu_guest_without_ecc_counts_says_so():
    """nvidia-smi(1) "Virtualization Mode": VGPU inside a vGPU guest. The 3090 VM's document (Pass-Through) with
    that one value changed: no ECC counts, and the note names the guest."""
    doc = _smi("telegraf-rtx-3090-v12").replace("<virtualization_mode>Pass-Through</virtualization_mode>",
                                                "<virtualization_mode>VGPU</virtualization_mode>")
    s = parse_snapshot({"nvidia-smi.xml": doc}, "epilog", "x")
    assert s.gpu_info["0000:00:10"]["virtualization"] == "VGPU"
    assert [n for n in coverage_of("n1", s, s, "x").notes if n.startswith("GPU")] == [
        "GPU 0000:00:10: no ECC counts (a vGPU guest: not reported inside the guest): memory errors could not be "
        "observed"]
