"""The `nvidia-smi -q -x` document: GPU counters by stable name, the facts that say what could not be counted, and
what nvidia-smi printed beside its document. Pure (text in, values out).

Counter names are stable across driver generations: `ecc.volatile.dram_uncorrectable` is the same counter whether
the driver prints `<dram_uncorrectable>` (R470+) or `<double_bit><device_memory>` (older drivers). A value the
driver prints as N/A is absent, never 0. DTD v13 (R590 and later) adds the memory-repair flags
(`<channel_repair_pending>`, `<tpc_repair_pending>`, `<unrepairable_memory>` under `<ecc_errors>`) and the
inactive row remaps (`<remapped_row_corr_inactive>`, `<remapped_row_unc_inactive>`). With MIG on, NVML reports no
volatile ECC count and no remapped rows for the whole GPU (nvmlDeviceGetMemoryErrorCounter: "Querying volatile
errors using device handles is currently not supported"; nvmlDeviceGetRemappedRows: "not supported" with active
instances): the per-instance counts (`<mig_devices><mig_device><ecc_error_count><volatile_count>`, SRAM
uncorrectable only) are what is read, summed for the GPU.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from attribution.model import normalize_gpu

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

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
    "remapped_rows.correctable_inactive": ("remapped_row_corr_inactive",),
    "remapped_rows.uncorrectable_inactive": ("remapped_row_unc_inactive",),
    "remapped_rows.pending": ("remapped_row_pending",), "remapped_rows.failure": ("remapped_row_failure",),
    "repair.channel_pending": ("channel_repair_pending",), "repair.tpc_pending": ("tpc_repair_pending",),
    "repair.unrepairable_memory": ("unrepairable_memory",),
    "pcie.replay_counter": ("replay_counter",), "pcie.replay_rollover_counter": ("replay_rollover_counter",),
    "reset.required": ("reset_required",), "reset.drain_and_reset_recommended": ("drain_and_reset_recommended",),
    "recovery_action.required": ("gpu_recovery_action",),
}
#: what nvidia-smi prints for a GPU's virtualization mode inside a vGPU guest (nvidia-smi(1) "Virtualization Mode")
VGPU_GUEST = "vgpu"


class TelemetryError(ValueError):
    """A snapshot file that is not what it claims to be (one line naming the problem)."""


def xml_tags_of(counter: str) -> tuple[str, ...]:
    """The XML elements a GPU counter name is read from (`ecc.volatile.dram_uncorrectable` -> its elements)."""
    if counter.startswith("ecc."):
        counter = counter.split(".", 2)[2]
    return XML_TAGS.get(counter, ())


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


def _mig_on(gpu: ET.Element) -> bool:
    return (_text(gpu, "mig_mode/current_mig") or "").strip().lower() == "enabled"


def mig_counters(gpu: ET.Element) -> dict[str, float]:
    """Per MIG instance, `mig.<gpu instance id>.ecc.volatile.<name>` of each `<mig_device>`'s volatile counts."""
    out: dict[str, float] = {}
    for dev in gpu.findall("mig_devices/mig_device"):
        gi = (_text(dev, "gpu_instance_id") or _text(dev, "index") or "").strip()
        counts = dev.find("ecc_error_count/volatile_count")
        if not gi or counts is None:
            continue
        for el in counts:
            _put(out, f"mig.{gi}.ecc.volatile.{el.tag}", _num(el.text))
    return out


def gpu_counters(gpu: ET.Element) -> dict[str, float]:
    """The counters of one `<gpu>` element, by stable name."""
    out: dict[str, float] = {}
    ecc = gpu.find("ecc_errors")
    mig = _mig_on(gpu)
    for scope in ("volatile", "aggregate"):
        sec = ecc.find(scope) if ecc is not None else None
        if sec is None or (mig and scope == "volatile"):
            continue  # with MIG on a GPU-level volatile count is not the GPU's count (NVML: not supported)
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
    if mig:
        per = mig_counters(gpu)
        out.update(per)
        names = {k.split(".", 2)[2] for k in per}  # ecc.volatile.<name>
        for name in sorted(names):
            _put(out, name, _sum(*(v for k, v in per.items() if k.split(".", 2)[2] == name)))
    _put(out, "repair.channel_pending", _yes_no(_text(ecc, "channel_repair_pending")))
    _put(out, "repair.tpc_pending", _yes_no(_text(ecc, "tpc_repair_pending")))
    _put(out, "repair.unrepairable_memory", _yes_no(_text(ecc, "unrepairable_memory")))
    rp = gpu.find("retired_pages")
    if rp is not None:
        _put(out, "retired_pages.single_bit", _num(_text(rp, "multiple_single_bit_retirement/retired_count")))
        _put(out, "retired_pages.double_bit", _num(_text(rp, "double_bit_retirement/retired_count")))
        _put(out, "retired_pages.pending", _yes_no(_text(rp, "pending_retirement")))
        _put(out, "retired_pages.pending_blacklist", _yes_no(_text(rp, "pending_blacklist")))
    rr = gpu.find("remapped_rows")
    if rr is not None:
        for tag, name in (("remapped_row_corr", "correctable"), ("remapped_row_unc", "uncorrectable"),
                          ("remapped_row_corr_inactive", "correctable_inactive"),
                          ("remapped_row_unc_inactive", "uncorrectable_inactive")):
            _put(out, f"remapped_rows.{name}", _num(_text(rr, tag)))
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


#: facts of a GPU kept beside its counters: (key, element path)
FACTS = (("uuid", "uuid"), ("index", "minor_number"), ("product", "product_name"), ("serial", "serial"),
         ("recovery_action", "gpu_recovery_action"), ("ecc_mode", "ecc_mode/current_ecc"),
         ("mig_mode", "mig_mode/current_mig"), ("virtualization", "gpu_virtualization_mode/virtualization_mode"))


def split_document(text: str) -> tuple[str, tuple[str, ...]]:
    """(the XML document, the other lines): nvidia-smi prints warnings ("WARNING: infoROM is corrupted at gpu
    0000:04:00.0") on the stream that carries its XML, before or after the document."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("<")), None)
    if start is None:
        return "", tuple(ln.strip() for ln in lines if ln.strip())
    # the last line ending an element (from the end: a document is ~1,400 lines a GPU, warnings a few)
    end = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].rstrip().endswith(">")), len(lines) - 1)
    other = [ln.strip() for ln in lines[:start] + lines[end + 1:] if ln.strip()]
    return "".join(lines[start:end + 1]), tuple(other)


#: Sections of a <gpu> that nothing here reads: the clocks (<supported_clocks> alone is most of a real document,
#: every memory clock with its graphics clocks), temperatures, power, utilization, memory use, the processes.
#: They are cut from the text before parsing (the tree then holds a few hundred elements a GPU, not thousands);
#: a document that no longer parses once cut (a section nested in itself, which nvidia-smi never writes) is parsed
#: whole.
UNREAD_SECTIONS = ("supported_clocks", "clocks", "applications_clocks", "default_applications_clocks",
                   "deferred_clocks", "max_clocks", "max_customer_boost_clocks", "clock_policy",
                   "clocks_event_reasons", "clocks_throttle_reasons", "clocks_event_reasons_counters",
                   "temperature", "supported_gpu_target_temp", "gpu_power_readings", "power_readings",
                   "module_power_readings", "utilization", "encoder_stats", "fbc_stats", "fb_memory_usage",
                   "bar1_memory_usage", "cc_protected_memory_usage", "voltage", "processes", "accounted_processes",
                   # what differs between two snapshots of an unchanged GPU: the time, the fan, the performance
                   # state, the PCIe link's current generation and width, its traffic
                   "timestamp", "fan_speed", "performance_state", "pci_gpu_link_info", "tx_util", "rx_util")
_UNREAD = re.compile(rb"<(" + b"|".join(t.encode() for t in UNREAD_SECTIONS) + rb")>.*?</\1>", re.S)


def parse_nvidia_smi_xml(text: str | bytes, where: str = "nvidia-smi.xml", memo: dict | None = None):
    """(counters by GPU, facts by GPU) of one `nvidia-smi -q -x` document. Raises TelemetryError. `memo` (a dict
    shared by the documents of one report): a document whose text, once the unread sections are cut, is one
    already parsed (the prolog's and epilog's of a GPU whose counters did not change) is not parsed again."""
    if isinstance(text, str):
        text = text.encode("utf-8", "replace")
    cut = _UNREAD.sub(b"", text)
    if memo is not None and cut in memo:
        gpus, info = memo[cut]
        return {k: dict(v) for k, v in gpus.items()}, {k: dict(v) for k, v in info.items()}
    import xml.etree.ElementTree as ET  # only where nvidia-smi wrote its XML (~8 ms of a hook's imports otherwise)

    # the DOCTYPE names a DTD nvidia-smi does not ship; expat ignores external DTDs and entity expansion is bounded
    try:
        root = ET.fromstring(cut)
    except ET.ParseError:
        memo = None  # parsed whole: its values are not only the cut text's
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
        for key, path in FACTS:
            v = (_text(g, path) or "").strip()
            if v and v != "N/A":
                facts[key] = v
        if driver:
            facts["driver"] = driver
        info[bus] = facts
    if memo is not None:
        memo[cut] = ({k: dict(v) for k, v in gpus.items()}, {k: dict(v) for k, v in info.items()})
    return gpus, info


def unobserved(gpu: str, counters, facts) -> list[str]:
    """What a GPU's snapshot could not count, in words (coverage notes): ECC disabled or not reported (a board
    without ECC, a vGPU guest), MIG without GPU-level volatile counts."""
    out: list[str] = []
    ecc = (facts.get("ecc_mode") or "").lower()
    guest = (facts.get("virtualization") or "").lower() == VGPU_GUEST
    if ecc == "disabled":
        out.append(f"GPU {gpu}: ECC disabled{' (a vGPU guest)' if guest else ''}: memory errors are not counted")
    elif not any(k.startswith("ecc.") for k in counters):
        why = "a vGPU guest: not reported inside the guest" if guest else "ECC not supported or not reported"
        out.append(f"GPU {gpu}: no ECC counts ({why}): memory errors could not be observed")
    if (facts.get("mig_mode") or "").lower() == "enabled":
        out.append(f"GPU {gpu}: MIG on: no GPU-level volatile ECC counts and no remapped rows (NVML does not "
                   "report them); volatile SRAM uncorrectable errors read per MIG instance, volatile DRAM errors "
                   "not seen")
    return out


# -- a failed GPU tool: which GPUs it named ---------------------------------------------------------------------


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
