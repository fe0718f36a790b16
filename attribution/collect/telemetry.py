"""Counter snapshots (docs/bundle.md "Telemetry snapshots"): parsing, separate from reading.

A snapshot is what a node's GPUs and NICs counted at one moment: `nvidia-smi -q -x` (ECC counts, retired pages,
remapped rows, PCIe replays, reset status, per GPU), the InfiniBand port counters and hw_counters under
/sys/class/infiniband/<dev>/ports/<port>/, and the AER counters under /sys/bus/pci/devices/<bdf>/. The parsers
here are pure (text in, values out); `read_snapshot` reads one snapshot folder, in the bundle's tree layout or in
the compact listing the hooks write (`grep -H` output, one `path:value` line per counter file).

Counter names are stable across driver generations: `ecc.volatile.dram_uncorrectable` is the same counter whether
the driver prints `<dram_uncorrectable>` (R470+) or `<double_bit><device_memory>` (older drivers). A value the
driver prints as N/A is absent, never 0.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from attribution.model import normalize_gpu
from attribution.samples import Snapshot

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

NVIDIA_SMI_XML = "nvidia-smi.xml"
#: written by the hooks only when nvidia-smi failed: its exit status, and what it printed on stderr
NVIDIA_SMI_STATUS = "nvidia-smi.status"
NVIDIA_SMI_ERR = "nvidia-smi.err"
#: the GPU part read through NVML (nvidia-ml-py) instead of nvidia-smi (collect/nvml.py writes it)
NVML_LISTING = "nvml.txt"
INFINIBAND_DIR = "infiniband"
PCI_DIR = "pci"
#: The hooks' compact form of the two sysfs trees (`grep -H` lines: `<path>:<value>` per InfiniBand counter file,
#: `<path>:TOTAL_ERR_FATAL <n>` per AER file), and the PCI topology (`readlink -f` of every device).
SYSFS_LISTING = "sysfs.txt"
PCI_TOPOLOGY = "pci-topology.txt"
AER_FILES = ("aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal")
MAX_FILE_BYTES = 8 << 20
#: The nvidia-smi XML elements each GPU counter comes from (hooks/lib.sh ATTRIBUTION_SMI_TAGS must hold them all).
XML_TAGS = {
    "dram_uncorrectable": ("dram_uncorrectable", "device_memory"),
    "dram_correctable": ("dram_correctable", "device_memory"),
    "sram_uncorrectable": ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded"),
    "sram_correctable": ("sram_correctable",),
    "sram_threshold_exceeded": ("sram_threshold_exceeded",),
    "double_bit_total": ("total",), "single_bit_total": ("total",),
    "retired_pages.single_bit": ("retired_count",), "retired_pages.double_bit": ("retired_count",),
    "retired_pages.pending": ("pending_retirement",), "retired_pages.pending_blacklist": ("pending_blacklist",),
    "remapped_rows.correctable": ("remapped_row_corr",), "remapped_rows.uncorrectable": ("remapped_row_unc",),
    "remapped_rows.pending": ("remapped_row_pending",), "remapped_rows.failure": ("remapped_row_failure",),
    "pcie.replay_counter": ("replay_counter",), "pcie.replay_rollover_counter": ("replay_rollover_counter",),
    "reset.required": ("reset_required",), "reset.drain_and_reset_recommended": ("drain_and_reset_recommended",),
    "recovery_action.required": ("gpu_recovery_action",),
}


def xml_tags_of(counter: str) -> tuple[str, ...]:
    """The XML elements a GPU counter name is read from (`ecc.volatile.dram_uncorrectable` -> its elements)."""
    if counter.startswith("ecc."):
        counter = counter.split(".", 2)[2]
    return XML_TAGS.get(counter, ())


class TelemetryError(ValueError):
    """A snapshot file that is not what it claims to be (one line naming the problem)."""


# -- nvidia-smi -q -x -----------------------------------------------------------------------------------------


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    t = text.strip()
    if not t:
        return None
    word = t.split()[0]
    try:
        return float(int(word))
    except ValueError:
        pass
    low = t.lower()
    if low in ("yes", "active"):
        return 1.0
    if low in ("no", "not active", "none"):
        return 0.0
    return None  # N/A, "Requested functionality has been deprecated", [Unknown Error], ...


def _yes_no(text: str | None) -> float | None:
    v = _num(text)
    return v if v in (0.0, 1.0) else None


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    x = el.find(path)
    return x.text if x is not None and x.text is not None else None


def _put(out: dict[str, float], name: str, value: float | None) -> None:
    if value is not None:
        out[name] = value


def _sum(*values: float | None) -> float | None:
    have = [v for v in values if v is not None]
    return sum(have) if have else None


def gpu_counters(gpu: ET.Element) -> dict[str, float]:
    """The counters of one `<gpu>` element, by stable name."""
    out: dict[str, float] = {}
    ecc = gpu.find("ecc_errors")
    for scope in ("volatile", "aggregate"):
        sec = ecc.find(scope) if ecc is not None else None
        if sec is None:
            continue
        p = f"ecc.{scope}."
        if sec.find("dram_uncorrectable") is not None or sec.find("sram_correctable") is not None:
            # R470 and later: SRAM and DRAM counted apart; R535 splits SRAM uncorrectable into parity and SEC-DED
            _put(out, p + "dram_correctable", _num(_text(sec, "dram_correctable")))
            _put(out, p + "dram_uncorrectable", _num(_text(sec, "dram_uncorrectable")))
            _put(out, p + "sram_correctable", _num(_text(sec, "sram_correctable")))
            _put(out, p + "sram_uncorrectable", _sum(_num(_text(sec, "sram_uncorrectable")),
                                                     _num(_text(sec, "sram_uncorrectable_parity")),
                                                     _num(_text(sec, "sram_uncorrectable_secded"))))
            _put(out, p + "sram_threshold_exceeded", _yes_no(_text(sec, "sram_threshold_exceeded")))
        else:  # older drivers: single_bit / double_bit by memory
            for bits, name in (("double_bit", "uncorrectable"), ("single_bit", "correctable")):
                _put(out, p + f"dram_{name}", _num(_text(sec, f"{bits}/device_memory")))
                _put(out, p + f"{bits}_total", _num(_text(sec, f"{bits}/total")))
    rp = gpu.find("retired_pages")
    if rp is not None:
        _put(out, "retired_pages.single_bit", _num(_text(rp, "multiple_single_bit_retirement/retired_count")))
        _put(out, "retired_pages.double_bit", _num(_text(rp, "double_bit_retirement/retired_count")))
        _put(out, "retired_pages.pending", _yes_no(_text(rp, "pending_retirement")))
        _put(out, "retired_pages.pending_blacklist", _yes_no(_text(rp, "pending_blacklist")))
    rr = gpu.find("remapped_rows")
    if rr is not None:
        _put(out, "remapped_rows.correctable", _num(_text(rr, "remapped_row_corr")))
        _put(out, "remapped_rows.uncorrectable", _num(_text(rr, "remapped_row_unc")))
        _put(out, "remapped_rows.pending", _yes_no(_text(rr, "remapped_row_pending")))
        _put(out, "remapped_rows.failure", _yes_no(_text(rr, "remapped_row_failure")))
    _put(out, "pcie.replay_counter", _num(_text(gpu, "pci/replay_counter")))
    _put(out, "pcie.replay_rollover_counter", _num(_text(gpu, "pci/replay_rollover_counter")))
    _put(out, "reset.required", _yes_no(_text(gpu, "gpu_reset_status/reset_required")))
    _put(out, "reset.drain_and_reset_recommended",
         _yes_no(_text(gpu, "gpu_reset_status/drain_and_reset_recommended")))
    action = (_text(gpu, "gpu_recovery_action") or "").strip()
    if action and action.lower() not in ("n/a",):
        out["recovery_action.required"] = 0.0 if action.lower() == "none" else 1.0
    return out


def parse_nvidia_smi_xml(text: str | bytes, where: str = "nvidia-smi.xml"):
    """(counters by GPU, facts by GPU) of one `nvidia-smi -q -x` document. Raises TelemetryError."""
    if isinstance(text, str):
        text = text.encode("utf-8", "replace")
    import xml.etree.ElementTree as ET  # only where nvidia-smi wrote its XML (~8 ms of a hook's imports otherwise)

    # the DOCTYPE names a DTD nvidia-smi does not ship; expat ignores external DTDs and entity expansion is bounded
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise TelemetryError(f"{where}: not an nvidia-smi XML document: {exc}") from None
    if root.tag not in ("nvidia_smi_log", "nvidia_smi"):
        raise TelemetryError(f"{where}: root element <{root.tag}>, expected <nvidia_smi_log>")
    gpus: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, str]] = {}
    driver = (root.findtext("driver_version") or "").strip()
    for g in root.findall("gpu"):
        bus = normalize_gpu(g.get("id") or _text(g, "pci/pci_bus_id"))
        if not bus:
            continue
        gpus[bus] = gpu_counters(g)
        facts = {"pci_bus_id": (g.get("id") or _text(g, "pci/pci_bus_id") or "").strip()}
        for key, path in (("uuid", "uuid"), ("index", "minor_number"), ("product", "product_name"),
                          ("serial", "serial"), ("recovery_action", "gpu_recovery_action")):
            v = (_text(g, path) or "").strip()
            if v and v != "N/A":
                facts[key] = v
        if driver:
            facts["driver"] = driver
        info[bus] = facts
    return gpus, info


# -- sysfs: InfiniBand port counters, PCIe AER counters, PCI topology -----------------------------------------


def parse_aer(text: str) -> dict[str, float]:
    """An aer_dev_* file: `<name> <count>` lines and a TOTAL_ERR_* line (sysfs-bus-pci-devices-aer_stats)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = float(parts[1])
    return out


def _aer_total(values: Mapping[str, float]) -> float:
    totals = [v for k, v in values.items() if k.startswith("TOTAL_ERR")]
    return totals[0] if totals else sum(values.values())


def parse_infiniband_listing(text: str) -> dict[str, dict[str, float]]:
    """`grep -H . .../infiniband/<dev>/ports/<port>/{counters,hw_counters}/<name>` output: counters by port."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        path, sep, value = line.rpartition(":")
        if not sep or not value.strip().isdigit():
            continue
        parts = path.split("/")
        try:
            i = parts.index("ports")
        except ValueError:
            continue
        if i < 1 or len(parts) != i + 4 or parts[i + 2] not in ("counters", "hw_counters"):
            continue
        port = f"{parts[i - 1]}/{parts[i + 1]}"
        out.setdefault(port, {})[f"{parts[i + 2]}/{parts[i + 3]}"] = float(value.strip())
    return out


def parse_aer_listing(text: str) -> dict[str, dict[str, float]]:
    """`grep -H . /sys/bus/pci/devices/*/aer_dev_*` output (one `path:<name> <count>` line per counter)."""
    raw: dict[str, dict[str, dict[str, float]]] = {}
    for line in text.splitlines():
        path, sep, rest = _split_path(line)
        if not sep:
            continue
        parts = path.rstrip("/").split("/")
        if len(parts) < 2 or parts[-1] not in AER_FILES:
            continue
        raw.setdefault(parts[-2], {}).setdefault(parts[-1], {}).update(parse_aer(rest))
    return {bdf: {f: _aer_total(vals) for f, vals in files.items()} for bdf, files in raw.items()}


def _split_path(line: str) -> tuple[str, str, str]:
    # a bdf holds colons (0000:3a:00.0): the path ends at the aer_dev_* file name
    for name in AER_FILES:
        k = line.find("/" + name + ":")
        if k >= 0:
            end = k + len(name) + 1
            return line[:end], ":", line[end + 1:]
    return line, "", ""


def parse_pci_topology(text: str) -> dict[str, tuple[str, ...]]:
    """`readlink -f /sys/bus/pci/devices/*` output: each device's upstream bridges, nearest first."""
    out: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        chain = [p for p in line.strip().split("/") if _is_bdf(p)]
        if chain:
            out[chain[-1]] = tuple(reversed(chain[:-1]))
    return out


def _is_bdf(s: str) -> bool:
    parts = s.split(":")
    return len(parts) == 3 and len(parts[0]) == 4 and len(parts[1]) == 2 and "." in parts[2]


# -- a failed GPU tool: which GPUs it named ---------------------------------------------------------------------


def _status(path: Path) -> int:
    try:
        return int(path.read_text().split()[0]) if path.is_file() else 0
    except (OSError, ValueError, IndexError):
        return 0


def _gpu_token(token: str) -> str | None:
    """`GPU0000:03:00.0:` or `00000000:3B:00.0` -> `0000:03:00`; None for anything that is not a PCI id."""
    t = token.strip(":,;()[]'\"").lower()
    while t and not t[0].isdigit() and t[0] not in "abcdef":
        t = t[1:]
    if t.startswith("gpu"):
        t = t[3:]
    parts = t.split(":")
    if len(parts) != 3 or "." not in parts[2]:
        return None
    dev, fn = parts[2].split(".", 1)
    hexd = "0123456789abcdef"
    if not (len(parts[0]) in (4, 8) and len(parts[1]) == 2 and len(dev) == 2 and fn.isdigit()):
        return None
    if not all(c in hexd for c in parts[0] + parts[1] + dev):
        return None
    return normalize_gpu(t)


def named_gpus(text: str) -> tuple[str, ...]:
    """The GPUs a failed GPU tool named in what it printed (every PCI id token), in order, once each. Which
    message it printed is not interpreted here: a tool that failed and named a GPU could not reach it."""
    out: list[str] = []
    for token in text.split():
        g = _gpu_token(token)
        if g and g not in out:
            out.append(g)
    return tuple(out)


# -- reading one snapshot folder ------------------------------------------------------------------------------


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise TelemetryError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", "replace")


def parse_snapshot(files: Mapping[str, str], phase: str, shown: str) -> Snapshot | None:
    """One snapshot from its files' text ({file name: text}: the compact form the hooks write, what a node's report
    carries); None when there is none. Pure: what cannot be parsed becomes a problem of the snapshot."""
    if not files:
        return None
    gpus: dict = {}
    info: dict = {}
    ports: dict[str, dict[str, float]] = {}
    pci: dict[str, dict[str, float]] = {}
    parents: dict[str, tuple[str, ...]] = {}
    present: list[str] = []
    problems: list[str] = []
    lost: tuple[str, ...] = ()
    status_text = (files.get(NVIDIA_SMI_STATUS) or "").strip()
    status = int(status_text) if status_text.isdigit() and len(status_text) < 6 else 0
    if NVIDIA_SMI_XML in files or status:
        text = files.get(NVIDIA_SMI_XML, "")
        err = files.get(NVIDIA_SMI_ERR, "")
        try:
            gpus, info = parse_nvidia_smi_xml(text, f"{shown}/{NVIDIA_SMI_XML}")
            present.append("nvidia-smi")
        except TelemetryError as exc:
            if not status:
                problems.append(str(exc))
            else:
                first = next((ln.strip() for ln in (err + "\n" + text).splitlines() if ln.strip()), "")
                problems.append(f"{shown}: nvidia-smi exited {status}" + (f": {first}" if first else ""))
        if status:
            lost = tuple(g for g in named_gpus(err + "\n" + text) if g not in gpus)
    listing = files.get(SYSFS_LISTING)
    if listing is not None:
        ports = parse_infiniband_listing(listing)
        if ports:
            present.append("infiniband")
        pci = parse_aer_listing(listing)
        if pci:
            present.append("pci")
    if files.get(PCI_TOPOLOGY) is not None:
        parents = parse_pci_topology(files[PCI_TOPOLOGY])
    return Snapshot(phase, _freeze(gpus), _freeze(info), _freeze(ports), _freeze(pci),
                    MappingProxyType(dict(parents)), tuple(present), tuple(problems), lost, ())


def read_snapshot(folder: Path, phase: str, shown: str | None = None) -> Snapshot | None:
    """The snapshot in `folder` (None when the folder does not exist). Unreadable parts become problems."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    shown = shown or str(folder)
    gpus: dict = {}
    info: dict = {}
    ports: dict[str, dict[str, float]] = {}
    pci: dict[str, dict[str, float]] = {}
    parents: dict[str, tuple[str, ...]] = {}
    present: list[str] = []
    problems: list[str] = []
    lost: tuple[str, ...] = ()
    gaps: list[str] = []
    try:
        xml = folder / NVIDIA_SMI_XML
        status = _status(folder / NVIDIA_SMI_STATUS)
        if xml.is_file() or status:
            text = _read(xml) if xml.is_file() else ""
            err = _read(folder / NVIDIA_SMI_ERR) if (folder / NVIDIA_SMI_ERR).is_file() else ""
            try:
                gpus, info = parse_nvidia_smi_xml(text, f"{shown}/{NVIDIA_SMI_XML}")
                present.append("nvidia-smi")
            except TelemetryError as exc:
                if not status:
                    raise
                first = next((ln.strip() for ln in (err + "\n" + text).splitlines() if ln.strip()), "")
                problems.append(f"{shown}: nvidia-smi exited {status}" + (f": {first}" if first else ""))
            if status:
                lost = tuple(g for g in named_gpus(err + "\n" + text) if g not in gpus)
        nvml = folder / NVML_LISTING
        if nvml.is_file() and "nvidia-smi" not in present:
            from attribution.collect.nvml import parse_nvml_listing

            gpus, info, lost, notes, answered = parse_nvml_listing(_read(nvml))
            if answered:
                present.append("nvidia-smi")  # the GPU part (read through NVML rather than the tool)
                problems.extend(f"{shown}/{NVML_LISTING}: {n}" for n in notes)
            else:
                gaps.extend(notes)
    except (OSError, TelemetryError) as exc:
        problems.append(str(exc))
    try:
        listing = _read(folder / SYSFS_LISTING) if (folder / SYSFS_LISTING).is_file() else None
        if listing is not None:
            ports = parse_infiniband_listing(listing)
        elif (folder / INFINIBAND_DIR).is_dir():
            ports = _infiniband_tree(folder / INFINIBAND_DIR)
        if ports:
            present.append("infiniband")
        if listing is not None:
            pci = parse_aer_listing(listing)
        elif (folder / PCI_DIR).is_dir():
            pci = _pci_tree(folder / PCI_DIR)
        if pci:
            present.append("pci")
        for topo in (folder / PCI_TOPOLOGY, folder / PCI_DIR / "topology"):
            if topo.is_file():
                parents = parse_pci_topology(_read(topo))
                break
    except OSError as exc:
        problems.append(f"{shown}: {exc}")
    return Snapshot(phase, _freeze(gpus), _freeze(info), _freeze(ports), _freeze(pci),
                    MappingProxyType(dict(parents)), tuple(present), tuple(problems), lost, tuple(gaps))


def _infiniband_tree(root: Path) -> dict[str, dict[str, float]]:
    """infiniband/<device>/<port>/{counters,hw_counters}/<name>, one integer per file."""
    out: dict[str, dict[str, float]] = {}
    for dev in sorted(p for p in root.iterdir() if p.is_dir()):
        for port in sorted(p for p in dev.iterdir() if p.is_dir()):
            for group in ("counters", "hw_counters"):
                gdir = port / group
                if not gdir.is_dir():
                    continue
                for f in sorted(gdir.iterdir()):
                    v = _read(f).strip() if f.is_file() else ""
                    if v.isdigit():
                        out.setdefault(f"{dev.name}/{port.name}", {})[f"{group}/{f.name}"] = float(v)
    return out


def _pci_tree(root: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for dev in sorted(p for p in root.iterdir() if p.is_dir()):
        for name in AER_FILES:
            f = dev / name
            if f.is_file():
                out.setdefault(dev.name, {})[name] = _aer_total(parse_aer(_read(f)))
    return out


def _freeze(d: Mapping) -> Mapping:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in d.items()})


def snapshot_to_json(s: Snapshot) -> dict:
    return {"phase": s.phase, "gpus": {k: dict(v) for k, v in s.gpus.items()},
            "gpu_info": {k: dict(v) for k, v in s.gpu_info.items()},
            "ports": {k: dict(v) for k, v in s.ports.items()}, "pci": {k: dict(v) for k, v in s.pci.items()},
            "parents": {k: list(v) for k, v in s.parents.items()}, "present": list(s.present),
            "problems": list(s.problems), "lost": list(s.lost), "gaps": list(s.gaps)}


def snapshot_from_json(d: Mapping) -> Snapshot:
    """A snapshot from a report payload. Raises TelemetryError on a malformed one."""
    try:
        def counters(x) -> dict[str, dict[str, float]]:
            return {str(k): {str(n): float(v) for n, v in dict(vals).items()} for k, vals in dict(x or {}).items()}
        return Snapshot(
            str(d["phase"]), _freeze(counters(d.get("gpus"))),
            _freeze({str(k): {str(n): str(v) for n, v in dict(vals).items()}
                     for k, vals in dict(d.get("gpu_info") or {}).items()}),
            _freeze(counters(d.get("ports"))), _freeze(counters(d.get("pci"))),
            MappingProxyType({str(k): tuple(str(x) for x in v) for k, v in dict(d.get("parents") or {}).items()}),
            tuple(str(x) for x in d.get("present") or ()), tuple(str(x) for x in d.get("problems") or ()),
            tuple(str(x) for x in d.get("lost") or ()), tuple(str(x) for x in d.get("gaps") or ()))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TelemetryError(f"malformed telemetry snapshot: {exc}") from None


__all__ = ["Snapshot", "TelemetryError", "parse_nvidia_smi_xml", "parse_snapshot", "gpu_counters", "parse_aer",
           "parse_infiniband_listing", "parse_aer_listing", "parse_pci_topology", "read_snapshot",
           "snapshot_to_json", "snapshot_from_json"]


# -- a bundle's snapshots -------------------------------------------------------------------------------------

TELEMETRY_DIR = "telemetry"
PHASES = ("prolog", "epilog")


def coverage_of(node: str, prolog: Snapshot | None, epilog: Snapshot | None, shown: str):
    """One coverage record saying what the node's two snapshots hold (a missing tool is a gap, not an error)."""
    from attribution.model import Coverage

    notes: list[str] = []
    for name, s in (("prolog", prolog), ("epilog", epilog)):
        if s is None:
            notes.append(f"no {name} snapshot: absolute values only")
            continue
        for part in ("nvidia-smi", "infiniband", "pci"):
            if part not in s.present:
                notes.append(f"{name} snapshot has no {part} counters")
        notes.extend(f"{name} snapshot: {g}" for g in s.gaps)
        notes.extend(s.problems)
    have = [s for s in (prolog, epilog) if s is not None]
    status = "ok" if have and any(s.present for s in have) else "empty"
    if any(s.problems for s in have) and not any(s.present for s in have):
        status = "error"
    counted = sum(len(s.gpus) + len(s.ports) + len(s.pci) for s in have)
    return Coverage("telemetry", node, status, lines=counted, file=shown, notes=tuple(notes))


def read_node_telemetry(node_dir: Path, shown: str) -> tuple[Snapshot | None, Snapshot | None] | None:
    """A node folder's prolog and epilog snapshots; None when it has no telemetry folder at all."""
    tdir = Path(node_dir) / TELEMETRY_DIR
    if not tdir.is_dir():
        return None
    pro = read_snapshot(tdir / "prolog", "prolog", f"{shown}/prolog")
    epi = read_snapshot(tdir / "epilog", "epilog", f"{shown}/epilog")
    return pro, epi


def collect_bundle_telemetry(bundle: Path, nodes) -> tuple[dict, list]:
    """{node: (prolog, epilog)} for every node of the bundle with a telemetry folder, and their coverage."""
    snaps: dict[str, tuple[Snapshot | None, Snapshot | None]] = {}
    coverage = []
    for node in nodes:
        shown = f"nodes/{node}/{TELEMETRY_DIR}"
        got = read_node_telemetry(Path(bundle) / "nodes" / node, shown)
        if got is None:
            continue
        snaps[node] = got
        coverage.append(coverage_of(node, got[0], got[1], shown))
    return snaps, coverage
