"""Counter snapshots: parsing real-format documents (collect.telemetry), the counter rules (extract.counters), and
what the hooks compare (hooks/lib.sh). Pure: no database, no Slurm."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from attribution.collect.telemetry import (parse_aer, parse_aer_listing, parse_infiniband_listing,
                                           parse_nvidia_smi_xml, parse_pci_topology, read_snapshot,
                                           snapshot_from_json, snapshot_to_json, TelemetryError, xml_tags_of)
from attribution.extract.counters import check_examples, counter_rules, evaluate, watched
from attribution.model import ExecutionContext
from attribution.node.snapshots import pci_topology, read_snapshots
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.rulecheck import check_pack, example_context
from attribution.samples import Snapshot

from tests.conftest import CASES, ROOT
from tests.harness.fakenode import FakeNode, smi_document

DATA = ROOT / "tests" / "data" / "telemetry"
UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("n1", "n2"), state="FAILED",
                       start=datetime(2026, 10, 1, 12, tzinfo=UTC), end=datetime(2026, 10, 1, 13, tzinfo=UTC))


# -- parsing: every driver generation, by the values the documents hold -------------------------------------------

def test_r440_v100_single_and_double_bit_counts():
    gpus, info = parse_nvidia_smi_xml((DATA / "nvidia-smi-r440-v100.xml").read_text())
    assert list(gpus) == ["0000:86:00"]
    g = gpus["0000:86:00"]
    assert g["ecc.volatile.double_bit_total"] == 1 and g["ecc.volatile.dram_uncorrectable"] == 1
    assert g["ecc.aggregate.single_bit_total"] == 3 and g["ecc.aggregate.dram_correctable"] == 3
    assert g["retired_pages.double_bit"] == 1 and g["retired_pages.pending"] == 1
    assert "remapped_rows.uncorrectable" not in g  # <remapped_rows>N/A</remapped_rows>: absent, never 0
    assert "reset.required" not in g
    assert info["0000:86:00"]["uuid"] == "GPU-3f1e5d7c-9b2a-4c6e-8d0f-1a2b3c4d5e6f"
    assert info["0000:86:00"]["driver"] == "440.82" and info["0000:86:00"]["index"] == "2"


def test_r470_a100_sram_dram_and_remapped_rows():
    gpus, _ = parse_nvidia_smi_xml((DATA / "nvidia-smi-r470-a100.xml").read_text())
    assert list(gpus) == ["0000:07:00", "0000:0f:00"]
    a, b = gpus["0000:07:00"], gpus["0000:0f:00"]
    assert a["ecc.aggregate.dram_uncorrectable"] == 1 and a["ecc.aggregate.dram_correctable"] == 12
    assert a["remapped_rows.uncorrectable"] == 1 and a["remapped_rows.pending"] == 0
    assert "retired_pages.double_bit" not in a  # N/A on A100
    assert b["remapped_rows.pending"] == 1 and b["pcie.replay_counter"] == 3


def test_r535_h100_parity_and_secded_add_up_and_reset_status():
    gpus, _ = parse_nvidia_smi_xml((DATA / "nvidia-smi-r535-h100.xml").read_text())
    g = gpus["0000:1b:00"]
    assert g["ecc.volatile.sram_uncorrectable"] == 0 and g["ecc.aggregate.sram_threshold_exceeded"] == 0
    assert g["reset.required"] == 0 and g["reset.drain_and_reset_recommended"] == 0
    assert "recovery_action.required" not in g
    gpus, info = parse_nvidia_smi_xml((DATA / "nvidia-smi-r550-h100-reset.xml").read_text())
    g = gpus["0000:1b:00"]
    assert g["ecc.volatile.sram_uncorrectable"] == 1 and g["reset.required"] == 1
    assert g["recovery_action.required"] == 1 and info["0000:1b:00"]["recovery_action"] == "Reset"


def test_a_deprecated_status_string_is_absent_not_zero():
    doc = (DATA / "nvidia-smi-r535-h100.xml").read_text().replace(
        "<reset_required>No</reset_required>",
        "<reset_required>Requested functionality has been deprecated</reset_required>")
    gpus, _ = parse_nvidia_smi_xml(doc)
    assert "reset.required" not in gpus["0000:1b:00"]


def test_not_xml_is_one_error_naming_the_file():
    with pytest.raises(TelemetryError, match=r"^x/nvidia-smi.xml: not an nvidia-smi XML document"):
        parse_nvidia_smi_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                             "x/nvidia-smi.xml")


def test_the_sections_cut_before_parsing_change_no_value(monkeypatch):
    """The clocks, temperatures, power readings, utilization and processes are cut from the text before it is
    parsed: every stored document (four driver generations, fourteen real boards, the faked node's 8 GPUs) reads
    the same counters and facts as from the whole tree, and the cut leaves less to parse."""
    import attribution.collect.smi_xml as smi_xml

    docs = sorted(DATA.rglob("*.xml"))
    assert len(docs) >= 15
    texts = [d.read_bytes() for d in docs] + [smi_document(8).encode()]
    cut = [smi_xml._UNREAD.sub(b"", t) for t in texts]
    assert sum(map(len, cut)) < 0.7 * sum(map(len, texts))
    pruned = [parse_nvidia_smi_xml(t) for t in texts]
    monkeypatch.setattr(smi_xml, "_UNREAD", re.compile(rb"(?!)"))  # matches nothing: the whole tree
    whole = [parse_nvidia_smi_xml(t) for t in texts]
    assert pruned == whole and all(gpus for gpus, _ in whole)


def test_an_epilog_document_unchanged_but_for_time_heat_and_traffic_is_parsed_once():
    """A report's two phases share a memo: the epilog's document that differs from the prolog's only in what
    changes on an idle GPU (the time, temperatures, the fan, the performance state, the PCIe link's current
    generation, its traffic) reads from the prolog's parse with the same values; one changed counter is parsed."""
    text = (DATA / "nvidia-smi-r535-h100.xml").read_text()
    later = (text.replace("Tue Oct  1 12:00:02 2026", "Tue Oct  1 13:10:40 2026")
             .replace("<gpu_temp>61 C</gpu_temp>", "<gpu_temp>38 C</gpu_temp>")
             .replace("<performance_state>P0</performance_state>", "<performance_state>P8</performance_state>")
             .replace("<current_link_gen>5</current_link_gen>", "<current_link_gen>1</current_link_gen>")
             .replace("<tx_util>543 KB/s</tx_util>", "<tx_util>0 KB/s</tx_util>"))
    assert later.count("\n") == text.count("\n") and later != text
    memo: dict = {}
    first, second = parse_nvidia_smi_xml(text, memo=memo), parse_nvidia_smi_xml(later, memo=memo)
    assert len(memo) == 1 and first == second == parse_nvidia_smi_xml(later)
    changed = later.replace("<dram_uncorrectable>0</dram_uncorrectable>",
                            "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    third = parse_nvidia_smi_xml(changed, memo=memo)
    assert len(memo) == 2 and third == parse_nvidia_smi_xml(changed) != first
    second[0][next(iter(second[0]))]["x"] = 1  # a caller's change to what it got reaches no other caller
    assert parse_nvidia_smi_xml(later, memo=memo) == first


def test_a_section_nested_in_itself_is_parsed_whole():
    """Cutting from <clocks> to the first </clocks> breaks a document where a cut section holds one of the same name
    (nvidia-smi never writes that): the whole document is parsed instead, with the same counters."""
    text = (DATA / "nvidia-smi-r535-h100.xml").read_text()
    odd = text.replace("<clocks>", "<clocks><clocks></clocks>", 1)
    assert odd != text and parse_nvidia_smi_xml(odd) == parse_nvidia_smi_xml(text)


def test_aer_file_as_the_kernel_documents_it():
    text = "RxErr 0\nBadTLP 2\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n"
    assert parse_aer(text)["TOTAL_ERR_COR"] == 3 and parse_aer(text)["BadTLP"] == 2


def test_listings_parse_bdfs_with_colons_and_ignore_other_lines():
    ib = ("/sys/class/infiniband/mlx5_3/ports/1/counters/link_downed:2\n"
          "/sys/class/infiniband/mlx5_3/ports/1/hw_counters/out_of_buffer:17\n"
          "/sys/bus/pci/devices/0000:3a:00.0/aer_dev_fatal:TOTAL_ERR_FATAL 1\n")
    assert parse_infiniband_listing(ib) == {"mlx5_3/1": {"counters/link_downed": 2, "hw_counters/out_of_buffer": 17}}
    assert parse_aer_listing(ib) == {"0000:3a:00.0": {"aer_dev_fatal": 1}}
    topo = parse_pci_topology("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1b:00.0\n")
    assert topo["0000:1b:00.0"] == ("0000:17:01.0", "0000:16:00.0", "0000:15:01.0")


def test_the_hooks_listing_and_the_bundle_tree_read_the_same(tmp_path):
    """A snapshot the hook took on a faked node (compact listing) equals the same node copied as the bundle's
    tree layout (one file per counter)."""
    node = FakeNode(tmp_path / "root")
    node.ib_counter(2, "link_downed", 4)
    node.aer(node.bridge_of_gpu(5), "aer_dev_fatal", {"SDES": 1})
    hook = tmp_path / "hook"
    _snapshot(node, hook, "epilog")
    # the PCI topology: the node collector's part of the epilog snapshot (attribution/node/snapshots.py)
    (hook / "pci-topology.txt").write_text(pci_topology(str(node.root)))
    tree = tmp_path / "tree"
    (tree).mkdir()
    shutil.copy(hook / "nvidia-smi.xml", tree / "nvidia-smi.xml")
    for dev in (node.sys / "class" / "infiniband").iterdir():
        for group in ("counters", "hw_counters"):
            shutil.copytree(dev / "ports" / "1" / group, tree / "infiniband" / dev.name / "1" / group)
    for bdf, d in node.devices.items():
        (tree / "pci" / bdf).mkdir(parents=True)
        for f in ("aer_dev_fatal", "aer_dev_nonfatal"):
            shutil.copy(d / f, tree / "pci" / bdf / f)
    shutil.copy(hook / "pci-topology.txt", tree / "pci-topology.txt")
    a, b = read_snapshot(hook, "epilog"), read_snapshot(tree, "epilog")
    assert a.present == b.present == ("nvidia-smi", "infiniband", "pci")
    assert a.gpus == b.gpus and a.pci == b.pci and a.parents == b.parents
    # the hook reads only the watched port counters; the tree holds them all
    assert all(dict(b.ports[p]).items() >= dict(a.ports[p]).items() for p in a.ports)
    assert a.ports["mlx5_2/1"]["counters/link_downed"] == 4 and len(a.ports) == 8 and len(a.gpus) == 8
    assert a.pci[node.bridge_of_gpu(5)]["aer_dev_fatal"] == 1
    assert a.gpu_of(node.bridge_of_gpu(5)) == "0000:c3:00"
    assert snapshot_from_json(snapshot_to_json(a)) == a



def test_the_collectors_pci_topology_is_what_readlink_printed_in_the_hook(tmp_path):
    """The epilog snapshot's PCI topology, now the node collector's (a clean job's hook starts no process for it):
    the same lines `readlink -f /sys/bus/pci/devices/*` printed, read with the bridges above each GPU; a prolog
    snapshot, or one without sysfs lines, gets none."""
    node = FakeNode(tmp_path / "root")
    folder = tmp_path / "telemetry"
    _snapshot(node, folder / "prolog", "prolog")
    _snapshot(node, folder / "epilog", "epilog")
    devices = sorted((node.sys / "bus" / "pci" / "devices").iterdir())
    printed = subprocess.run(["readlink", "-f", *map(str, devices)], capture_output=True, text=True, check=True)
    got = read_snapshots(str(folder), str(node.root))
    assert got["epilog"]["pci-topology.txt"] == printed.stdout
    assert "pci-topology.txt" not in got["prolog"]
    assert "pci-topology.txt" not in read_snapshots(str(folder))["epilog"]  # asked for only by the collector
    parents = parse_pci_topology(got["epilog"]["pci-topology.txt"])
    assert parents[node.gpu_bdf[5]][0] == node.bridge_of_gpu(5)
    (folder / "epilog" / "sysfs.txt").write_text("")
    assert "pci-topology.txt" not in read_snapshots(str(folder), str(node.root))["epilog"]

# -- the rules ----------------------------------------------------------------------------------------------------

def _snap(phase, gpus=None, ports=None, pci=None, parents=None, present=("nvidia-smi", "infiniband", "pci")):
    return Snapshot(phase, gpus or {}, {}, ports or {}, pci or {}, parents or {}, present)


def test_done_when_ecc_and_remapped_row_on_one_gpu(ruleset):
    before = {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 0, "remapped_rows.uncorrectable": 0},
              "0000:1b:00": {"ecc.volatile.dram_uncorrectable": 0, "remapped_rows.uncorrectable": 0}}
    after = {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 2, "remapped_rows.uncorrectable": 1},
             "0000:1b:00": {"ecc.volatile.dram_uncorrectable": 0, "remapped_rows.uncorrectable": 0}}
    evs = evaluate(ruleset, CTX, "n2", _snap("prolog", before), _snap("epilog", after))
    assert sorted((e.rule, e.kind, e.role, e.gpu, e.node) for e in evs) == [
        ("counters.gpu_remapped_rows_uncorrectable", "gpu_ecc_counter", "cause", "0000:61:00", "n2"),
        ("counters.gpu_uncorrectable_ecc", "gpu_ecc_counter", "cause", "0000:61:00", "n2")]
    ecc = next(e for e in evs if e.rule == "counters.gpu_uncorrectable_ecc")
    assert ecc.time == CTX.start and ecc.source == "telemetry" and ecc.outcome == "gpu_hardware"
    assert ecc.fields["evidence"] == "system" and ecc.fields["ecc.volatile.dram_uncorrectable"] == "0 -> 2"


def test_unchanged_counters_give_nothing(ruleset):
    s = {"0000:61:00": {"ecc.aggregate.dram_uncorrectable": 5, "remapped_rows.pending": 1, "reset.required": 1}}
    ports = {"mlx5_0/1": {"counters/link_downed": 3, "counters/symbol_error": 40}}
    pci = {"0000:3a:00.0": {"aer_dev_fatal": 1}}
    assert evaluate(ruleset, CTX, "n1", _snap("prolog", s, ports, pci), _snap("epilog", s, ports, pci)) == []


def test_one_side_missing_is_context_only(ruleset):
    after = {"0000:61:00": {"ecc.aggregate.dram_uncorrectable": 2, "remapped_rows.uncorrectable": 1,
                            "remapped_rows.pending": 0}}
    ports = {"mlx5_0/1": {"counters/link_downed": 2, "counters/symbol_error": 0}}
    for pro, epi in ((None, _snap("epilog", after, ports)), (_snap("prolog", after, ports), None)):
        evs = evaluate(ruleset, CTX, "n1", pro, epi)
        assert sorted(e.kind for e in evs) == ["gpu_ecc_counter", "gpu_ecc_counter", "ib_link_downed"]
        assert {e.role for e in evs} == {"context"}
        assert all(e.fields["window"].endswith(" only") for e in evs)
    # a snapshot that lacks a part (no nvidia-smi at the prolog) is absolute for that part only
    evs = evaluate(ruleset, CTX, "n1", _snap("prolog", {}, ports, present=("infiniband",)), _snap("epilog", after, ports))
    assert {(e.kind, e.role) for e in evs} == {("gpu_ecc_counter", "context")}


def test_link_downed_is_a_network_cause_on_the_node_symbol_errors_context(ruleset):
    evs = evaluate(ruleset, CTX, "n2",
                   _snap("prolog", ports={"mlx5_2/1": {"counters/link_downed": 1, "counters/symbol_error": 7}}),
                   _snap("epilog", ports={"mlx5_2/1": {"counters/link_downed": 2, "counters/symbol_error": 90}}))
    assert sorted((e.kind, e.role, e.outcome, e.gpu) for e in evs) == [
        ("ib_link_downed", "cause", "network", None), ("ib_port_errors", "context", None, None)]


def test_fatal_aer_on_the_gpus_bridge_names_the_gpu_elsewhere_it_is_context(ruleset):
    parents = {"0000:1b:00.0": ("0000:17:01.0", "0000:16:00.0"), "0000:18:00.0": ("0000:17:00.0", "0000:16:00.0")}
    gpus = {"0000:1b:00": {}}
    before = {"0000:17:01.0": {"aer_dev_fatal": 0}, "0000:17:00.0": {"aer_dev_fatal": 0}}
    after = {"0000:17:01.0": {"aer_dev_fatal": 1}, "0000:17:00.0": {"aer_dev_fatal": 1}}
    evs = evaluate(ruleset, CTX, "n1", _snap("prolog", gpus, pci=before, parents=parents),
                   _snap("epilog", gpus, pci=after, parents=parents))
    assert sorted((e.fields["device"], e.kind, e.role, e.gpu) for e in evs) == [
        ("0000:17:00.0", "pcie_error", "context", None),
        ("0000:17:01.0", "pcie_aer_fatal", "cause", "0000:1b:00")]


def test_a_counter_reset_counts_what_it_shows_after(ruleset):
    evs = evaluate(ruleset, CTX, "n1", _snap("prolog", {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 5}}),
                   _snap("epilog", {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 1}}))
    assert [e.kind for e in evs] == ["gpu_ecc_counter"]
    evs = evaluate(ruleset, CTX, "n1", _snap("prolog", {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 5}}),
                   _snap("epilog", {"0000:61:00": {"ecc.volatile.dram_uncorrectable": 0}}))
    assert evs == []


def test_rules_check_runs_the_counter_examples(tmp_path):
    """A wrong expectation in rules/counters.yaml is a problem `rules check` reports (the examples run)."""
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    p = pack / "counters.yaml"
    p.write_text(p.read_text().replace("expect: [{kind: ib_link_downed, role: cause, outcome: network",
                                       "expect: [{kind: ib_link_downed, role: context, outcome: network", 1))
    problems, _ = check_pack(pack)
    assert len(problems) == 1 and "counter rule counters.ib_link_downed: example 1" in problems[0]
    assert "role is 'cause', expected 'context'" in problems[0]
    assert check_pack(ROOT / "rules")[0] == []


def test_rules_check_rejects_an_unknown_kind_and_where_off_pci(tmp_path):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    p = pack / "counters.yaml"
    text = p.read_text().replace("kind: ib_port_errors\n", "kind: ib_port_errorz\n", 1)
    text = text.replace("    device: ib_port\n    counters: [counters/link_downed]",
                        "    device: ib_port\n    where: gpu_path\n    counters: [counters/link_downed]", 1)
    p.write_text(text)
    problems, _ = check_pack(pack)
    assert any("unknown kind 'ib_port_errorz'" in x for x in map(str, problems)), problems
    assert any("'where' applies to device 'pci' only" in x for x in map(str, problems)), problems


def test_every_rule_example_passes(ruleset):
    assert check_examples(ruleset, example_context()) == []
    assert len(counter_rules(ruleset)) >= 10


# -- what the hooks compare covers every counter a rule reads ------------------------------------------------------

def _lib_value(name: str) -> str:
    text = (ROOT / "hooks" / "lib.sh").read_text()
    m = re.search(rf'^: "\$\{{{name}:=([^}}]*)\}}"', text, re.M) or re.search(rf"^{name}='([^']*)'", text, re.M)
    assert m, name
    return m.group(1)


def test_the_hooks_compare_every_counter_a_rule_reads(ruleset):
    w = watched(ruleset)
    ib = set(_lib_value("ATTRIBUTION_IB_COUNTERS").split())
    assert w["ib_port"] <= ib, w["ib_port"] - ib
    tags = set(_lib_value("ATTRIBUTION_SMI_TAGS").split("|"))
    for counter in w["gpu"]:
        assert xml_tags_of(counter), f"{counter}: no XML element known for it"
        assert set(xml_tags_of(counter)) & tags, counter
    assert w["pci"] <= {"aer_dev_fatal", "aer_dev_nonfatal"}  # the files the hooks grep


def _snapshot(node: FakeNode, folder: Path, phase: str) -> None:
    lib = ROOT / "hooks" / "lib.sh"
    env = {"ATTRIBUTION_HOOK_ENV": "/nonexistent", "ATTRIBUTION_SYSFS_ROOT": str(node.root),
           "ATTRIBUTION_NVIDIA_SMI": str(node.nvidia_smi), "ATTRIBUTION_LOG": str(folder.parent / "h.log")}
    r = subprocess.run(["/bin/bash", "-c", f'. "{lib}" && attribution_snapshot "$0" "$1"', str(folder), phase],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _key_differs(node: FakeNode, tmp: Path, change) -> bool:
    a, b = tmp / "a", tmp / "b"
    shutil.rmtree(a, ignore_errors=True)
    shutil.rmtree(b, ignore_errors=True)
    _snapshot(node, a, "prolog")
    change()
    _snapshot(node, b, "epilog")
    return (a / "counters.key").read_bytes() != (b / "counters.key").read_bytes()


def test_the_key_ignores_timestamps_temperatures_and_traffic_and_sees_every_watched_change(tmp_path, ruleset):
    node = FakeNode(tmp_path / "root")
    busy = {i: {"gpu_temp": "77 C", "used": "70000 MiB", "gpu_util": "99 %", "graphics_clock": "1755 MHz",
                "power_draw": "690.10 W", "pid": "99"} for i in range(8)}
    assert not _key_differs(node, tmp_path, lambda: (
        node.set_smi(extra=busy, timestamp="Tue Oct  1 13:59:59 2026"),
        node.ib_counter(3, "port_xmit_data", 123456789), node.ib_counter(3, "port_rcv_packets", 4242),
        node.aer(node.gpu_bdf[0], "aer_dev_correctable", {"RxErr": 5})))
    # every counter a GPU rule reads, changed alone on one GPU, changes the key
    xml = (ROOT / "tests" / "data" / "telemetry" / "nvidia-smi-r535-h100.xml").read_text()
    for counter in sorted(watched(ruleset)["gpu"]):
        for tag in xml_tags_of(counter):
            if f"<{tag}>" not in xml:
                continue  # an element of another driver generation
            value = "Yes" if counter.split(".")[-1] in ("pending", "failure", "required", "recommended",
                                                        "sram_threshold_exceeded") else "7"
            if counter == "recovery_action.required":
                value = "Reset"
            node.set_smi()
            assert _key_differs(node, tmp_path, lambda: node.set_smi({4: {tag: value}})), (counter, tag)
    for counter in sorted(watched(ruleset)["ib_port"]):
        node = FakeNode(tmp_path / f"root-{counter.replace('/', '-')}", gpus=1, hcas=2)
        assert _key_differs(node, tmp_path, lambda: node.ib_counter(1, counter.split("/")[1], 9)), counter
    node = FakeNode(tmp_path / "root-aer", gpus=1, hcas=1)
    for f in ("aer_dev_fatal", "aer_dev_nonfatal"):
        assert _key_differs(node, tmp_path, lambda: node.aer(node.bridge_of_gpu(0), f, {"DLP": 1})), f


def test_a_node_without_nvidia_smi_or_infiniband_is_a_gap_not_an_error(tmp_path, ruleset):
    empty = tmp_path / "root"
    (empty / "sys").mkdir(parents=True)
    folder = tmp_path / "snap"
    lib = ROOT / "hooks" / "lib.sh"
    env = {"ATTRIBUTION_HOOK_ENV": "/nonexistent", "ATTRIBUTION_SYSFS_ROOT": str(empty),
           "ATTRIBUTION_NVIDIA_SMI": str(tmp_path / "no-such-tool"), "ATTRIBUTION_LOG": str(tmp_path / "h.log")}
    r = subprocess.run(["/bin/bash", "-c", f'. "{lib}" && attribution_snapshot "$0" epilog', str(folder)], env=env,
                       timeout=60)
    assert r.returncode == 0
    s = read_snapshot(folder, "epilog")
    assert s.present == () and s.problems == ()
    from attribution.collect.telemetry import coverage_of

    cov = coverage_of("n1", None, s, "x")
    assert cov.status == "empty" and "no prolog snapshot: absolute values only" in cov.notes
    assert "epilog snapshot has no nvidia-smi counters" in cov.notes


# -- the cases ----------------------------------------------------------------------------------------------------

def _telemetry_events(ruleset, name):
    d = diagnose_bundle(ruleset, CASES / name)
    return d, [e for e in d.events if e.source == "telemetry"]


def test_case_clean_job_with_unchanged_counters_has_no_counter_event(ruleset):
    d, evs = _telemetry_events(ruleset, "21-clean-job-counters-unchanged")
    assert evs == []
    cov = {c.node: c for c in d.coverage if c.source == "telemetry"}
    # both layouts (the tree on elm-h100-11, the hooks' compact listing on elm-h100-12) hold every part
    assert {n: (c.status, c.notes) for n, c in cov.items()} == {"elm-h100-11": ("ok", ()), "elm-h100-12": ("ok", ())}
    snaps = {n: read_snapshot(CASES / "21-clean-job-counters-unchanged" / "nodes" / n / "telemetry" / "epilog",
                              "epilog") for n in cov}
    assert snaps["elm-h100-12"].pci["0000:3e:00.0"]["aer_dev_nonfatal"] == 1
    assert snaps["elm-h100-12"].gpu_of("0000:3e:00.0") == "0000:43:00"
    assert snaps["elm-h100-11"].ports["mlx5_1/1"]["counters/symbol_error"] == 40


def test_case_epilog_only_gives_absolute_context_only(ruleset):
    d, evs = _telemetry_events(ruleset, "22-epilog-snapshot-only-absolute-context")
    assert sorted((e.node, e.kind, e.gpu) for e in evs) == [
        ("fir-h100-08", "gpu_ecc_counter", "0000:d1:00"), ("fir-h100-08", "gpu_ecc_counter", "0000:d1:00"),
        ("fir-h100-08", "ib_link_downed", None)]
    assert {e.role for e in evs} == {"context"}
    assert all(e.time == d.context.end for e in evs)


def test_case_expected_yaml_root_gpu_is_the_counted_one(ruleset):
    exp = yaml.safe_load((CASES / "19-ecc-counters-grew-nccl-errors-only" / "expected.yaml").read_text())
    d, evs = _telemetry_events(ruleset, "19-ecc-counters-grew-nccl-errors-only")
    assert {(e.node, e.gpu, e.role) for e in evs} == {("ash-h100-02", exp["root_cause"]["gpu"], "cause")}
    assert not any(e.kind.startswith("xid") or e.code for e in d.events)  # no Xid anywhere
    assert "between the counter snapshots at 08:00:05 and 09:25:40" in d.verdict.explanation


def test_fake_tool_prints_a_document_the_parser_reads(tmp_path):
    node = FakeNode(tmp_path / "root")
    out = subprocess.run([str(node.nvidia_smi), "-q", "-x"], capture_output=True, text=True, check=True).stdout
    assert out == smi_document(8)
    gpus, _ = parse_nvidia_smi_xml(out)
    assert len(gpus) == 8


# -- a GPU that vanished, a burst of corrected errors: through the hooks' snapshots --------------------------------

def _pair(node: FakeNode, tmp: Path, change) -> tuple[Snapshot, Snapshot, bool]:
    differs = _key_differs(node, tmp, change)
    return read_snapshot(tmp / "a", "prolog"), read_snapshot(tmp / "b", "epilog"), differs


def test_a_gpu_gone_from_the_epilog_is_a_gpu_hardware_cause_on_that_gpu(tmp_path, ruleset):
    """GPU 3 (0000:61:00.0) falls off the bus and the kernel removes it: nvidia-smi lists the seven others and
    its PCI function leaves the AER listing. Both rules name it; nothing else is flagged."""
    node = FakeNode(tmp_path / "root")
    pro, epi, differs = _pair(node, tmp_path, lambda: node.lose_gpu(3))
    assert differs  # the clean-job epilog starts Python for it
    assert len(pro.gpus) == 8 and len(epi.gpus) == 7 and "0000:61:00.0" not in epi.pci
    evs = evaluate(ruleset, CTX, "n1", pro, epi)
    assert [(e.rule, e.kind, e.role, e.outcome, e.action, e.gpu) for e in evs] == [
        ("counters.gpu_vanished", "gpu_vanished", "cause", "gpu_hardware", "drain_node", "0000:61:00"),
        ("counters.pcie_gpu_function_vanished", "gpu_vanished", "cause", "gpu_hardware", "drain_node",
         "0000:61:00")]
    assert evs[0].time == CTX.start and evs[0].fields["vanished"] == "absent"
    assert evs[0].fields["ecc.aggregate.dram_uncorrectable"] == "0 -> gone"
    assert "no longer lists it" in evs[0].message


def test_nvidia_smi_failing_on_a_lost_gpu_names_that_gpu_and_no_other(tmp_path, ruleset):
    node = FakeNode(tmp_path / "root")
    msg = "Unable to determine the device handle for GPU 0000:61:00.0: Unknown Error"  # rwth-i6/returnn#1486 form
    pro, epi, differs = _pair(node, tmp_path, lambda: node.smi_fails(15, msg))
    assert differs and "nvidia-smi" not in epi.present and epi.lost == ("0000:61:00",)
    assert epi.problems == (f"{tmp_path / 'b'}: nvidia-smi exited 15: {msg}",)
    evs = evaluate(ruleset, CTX, "n1", pro, epi)
    assert [(e.rule, e.role, e.gpu, e.fields["vanished"]) for e in evs] == [
        ("counters.gpu_vanished", "cause", "0000:61:00", "unreachable")]


def test_nvidia_smi_failing_for_another_reason_is_a_gap_not_a_lost_gpu(tmp_path, ruleset):
    node = FakeNode(tmp_path / "root")
    pro, epi, differs = _pair(node, tmp_path, lambda: node.smi_fails(
        9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
           "latest NVIDIA driver is installed and running."))
    assert differs and epi.lost == () and "nvidia-smi" not in epi.present
    assert evaluate(ruleset, CTX, "n1", pro, epi) == []


def test_many_corrected_errors_are_context_a_few_are_nothing(tmp_path, ruleset):
    node = FakeNode(tmp_path / "root")  # the template's GPU counts aggregate dram_correctable 4, volatile 0
    pro, epi, _ = _pair(node, tmp_path, lambda: node.set_smi({3: {"dram_correctable": "250"}}))
    evs = evaluate(ruleset, CTX, "n1", pro, epi)
    assert [(e.kind, e.role, e.gpu, e.fields["ecc.volatile.dram_correctable"],
             e.fields["ecc.aggregate.dram_correctable"]) for e in evs] == [
        ("gpu_ecc_correctable", "context", "0000:61:00", "0 -> 250", "4 -> 250")]
    node.set_smi()
    pro, epi, differs = _pair(node, tmp_path, lambda: node.set_smi({3: {"dram_correctable": "30"}}))
    assert differs and evaluate(ruleset, CTX, "n1", pro, epi) == []


# -- the counter cases built from real captures (tests/cases/30-35) ---------------------------------------------

def _case_pair(name: str, node: str):
    base = CASES / name / "nodes" / node / "telemetry"
    return read_snapshot(base / "prolog", "prolog"), read_snapshot(base / "epilog", "epilog")


def test_an_inforom_warning_is_context_on_its_gpu_and_loses_no_gpu(ruleset):
    pro, epi = _case_pair("30-inforom-warning-document-still-read", "pin-ws-07")
    assert list(epi.gpus) == ["0000:04:00"] and epi.lost == ()
    evs = evaluate(ruleset, CTX, "pin-ws-07", pro, epi)
    assert [(e.rule, e.kind, e.role, e.gpu, e.fields["window"]) for e in evs] == [
        ("counters.gpu_inforom_corrupted", "gpu_inforom_corrupted", "context", "0000:04:00", "job")]
    assert evs[0].fields["said"] == "WARNING: infoROM is corrupted at gpu 0000:04:00.0"


def test_mig_per_instance_sram_error_is_the_uncorrectable_ecc_cause(ruleset):
    pro, epi = _case_pair("31-mig-instance-sram-uncorrectable", "tul-a100-03")
    evs = evaluate(ruleset, CTX, "tul-a100-03", pro, epi)
    assert [(e.rule, e.role, e.gpu) for e in evs] == [("counters.gpu_uncorrectable_ecc", "cause", "0000:01:00")]
    assert evs[0].fields["ecc.volatile.sram_uncorrectable"] == "0 -> 1"
    assert epi.gpus["0000:01:00"]["mig.4.ecc.volatile.sram_uncorrectable"] == 1


def test_no_devices_were_found_after_a_listing_is_every_gpu_gone(ruleset):
    pro, epi = _case_pair("33-no-devices-found-every-gpu-gone", "g4dn-0a1b")
    evs = evaluate(ruleset, CTX, "g4dn-0a1b", pro, epi)
    assert [(e.rule, e.kind, e.role, e.gpu, e.fields["vanished"]) for e in evs] == [
        ("counters.gpu_none_found", "gpu_vanished", "cause", "0000:00:1e", "said")]
    assert evs[0].fields["pcie.replay_counter"] == "0 -> gone"


def test_the_cases_coverage_says_what_could_not_be_observed(ruleset):
    got = {}
    for name in ("34-ib-link-downed-saturated", "35-clean-job-ecc-not-observable", "32-v13-tpc-repair-pending"):
        d = diagnose_bundle(ruleset, CASES / name)
        got.update({c.node: c for c in d.coverage if c.source == "telemetry"})
    assert {n: c.status for n, c in got.items()} == {"kes-h100-01": "missing", "vis-ws-01": "missing",
                                                     "vis-vm-02": "missing", "ada-ws-02": "missing"}
    assert ("port mlx5_1/1 counters/link_downed at its 8-bit maximum 255 at the prolog: a change during the job "
            "could not be seen") in got["kes-h100-01"].notes
    assert "GPU 0000:06:00: ECC disabled: memory errors are not counted" in got["vis-ws-01"].notes
    assert any(n.startswith("GPU 0000:00:10: no ECC counts") for n in got["vis-vm-02"].notes)
