"""The GPU part of a counter snapshot read through NVML (nvidia-ml-py's `pynvml` module) instead of nvidia-smi.

Optional: nvidia-ml-py is not a dependency. Without it, or without the driver's libnvidia-ml, the listing says so
in a `note` line and holds no GPU: a coverage gap, never an error. The counters get the names
collect/telemetry.py gives nvidia-smi's (`ecc.volatile.dram_uncorrectable`, `remapped_rows.pending`, ...), so the
counter rules read both alike.

The listing (`nvml.txt` in a snapshot folder; hooks/lib.sh compares its `gpu` and `lost` lines):

    driver 535.183.01
    gpu 0000:3b:00 ecc.volatile.dram_uncorrectable 0
    info 0000:3b:00 uuid GPU-5e0c1a2b-...
    lost 0000:3b:00 GPU is lost          (or `lost #3 ...`: the handle of index 3 could not be had)
    note nvidia-ml-py is not installed

Reading is `read_nvml(pynvml)` (the module passed in: the caller imports it, a test passes the real module over
a fake library); `nvml_listing()` imports it and never raises.
"""

from __future__ import annotations

import os
from typing import Any

from attribution.model import normalize_gpu

#: NVML's return code that means the device is gone (nvml.h NVML_ERROR_GPU_IS_LOST). A handle that cannot be had
#: at all (GPU is lost, Unknown Error: what a GPU that fell off the bus gives) is a `lost #index` line.
GONE = (15,)
#: codes that mean this counter does not exist here (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION,
#: INVALID_ARGUMENT for a location the architecture lacks)
ABSENT = (3, 13, 4, 2)

MEMORY_LOCATIONS = (("dram", "NVML_MEMORY_LOCATION_DRAM", 2), ("sram", "NVML_MEMORY_LOCATION_SRAM", 7))


class _Gone(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _code(exc: BaseException) -> int | None:
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


def _const(nv: Any, name: str, default: int) -> int:
    v = getattr(nv, name, default)
    return v if isinstance(v, int) else default


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class _Device:
    """One GPU's calls: absent counters are left out, a gone device raises _Gone."""

    def __init__(self, nv: Any, handle: Any, notes: list[str], gid: str) -> None:
        self.nv, self.h, self.notes, self.gid = nv, handle, notes, gid

    def call(self, name: str, *args):
        fn = getattr(self.nv, name, None)
        if fn is None:
            return None  # an older nvidia-ml-py
        try:
            return fn(self.h, *args)
        except self.nv.NVMLError as exc:
            code = _code(exc)
            if code in GONE:
                raise _Gone(str(exc)) from None
            if code not in ABSENT:
                self.notes.append(f"GPU {self.gid}: {name}: {exc}")
            return None


def _counters(nv: Any, dev: _Device) -> dict[str, float]:
    out: dict[str, float] = {}
    corrected = _const(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = _const(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    for scope, name, default in (("volatile", "NVML_VOLATILE_ECC", 0), ("aggregate", "NVML_AGGREGATE_ECC", 1)):
        counter_type = _const(nv, name, default)
        by_location = False
        for loc, const, loc_default in MEMORY_LOCATIONS:
            location = _const(nv, const, loc_default)
            for kind, err in (("uncorrectable", uncorrected), ("correctable", corrected)):
                v = dev.call("nvmlDeviceGetMemoryErrorCounter", err, counter_type, location)
                if v is not None:
                    out[f"ecc.{scope}.{loc}_{kind}"] = float(v)
                    by_location = True
        if not by_location:  # before R470 (V100): the totals, as nvidia-smi's double_bit/single_bit totals
            for kind, err in (("double_bit_total", uncorrected), ("single_bit_total", corrected)):
                v = dev.call("nvmlDeviceGetTotalEccErrors", err, counter_type)
                if v is not None:
                    out[f"ecc.{scope}.{kind}"] = float(v)
    rows = dev.call("nvmlDeviceGetRemappedRows")
    if rows is not None:
        corr, unc, pending, failure = rows
        out.update({"remapped_rows.correctable": float(corr), "remapped_rows.uncorrectable": float(unc),
                    "remapped_rows.pending": 1.0 if pending else 0.0,
                    "remapped_rows.failure": 1.0 if failure else 0.0})
    for key, name, default in (("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
                               ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)):
        pages = dev.call("nvmlDeviceGetRetiredPages", _const(nv, name, default))
        if pages is not None:
            out[f"retired_pages.{key}"] = float(len(pages))
    pending = dev.call("nvmlDeviceGetRetiredPagesPendingStatus")
    if pending is not None:
        out["retired_pages.pending"] = 1.0 if pending == _const(nv, "NVML_FEATURE_ENABLED", 1) else 0.0
    replays = dev.call("nvmlDeviceGetPcieReplayCounter")
    if replays is not None:
        out["pcie.replay_counter"] = float(replays)
    field = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if isinstance(field, int):
        values = dev.call("nvmlDeviceGetFieldValues", [field])
        if values is not None and len(values) and values[0].nvmlReturn == 0:
            action = int(values[0].value.uiVal)
            out["recovery_action.required"] = 0.0 if action == _const(nv, "NVML_GPU_RECOVERY_ACTION_NONE", 0) \
                else 1.0
    return out


def _info(dev: _Device, bus_id: str, driver: str | None) -> dict[str, str]:
    info = {"pci_bus_id": bus_id, "source": "nvml"}
    for key, name in (("uuid", "nvmlDeviceGetUUID"), ("serial", "nvmlDeviceGetSerial"),
                      ("product", "nvmlDeviceGetName"), ("index", "nvmlDeviceGetMinorNumber")):
        v = dev.call(name)
        if v is not None and _text(v).strip() not in ("", "N/A"):
            info[key] = _text(v).strip()
    if driver:
        info["driver"] = driver
    return info


def read_nvml(nv: Any) -> list[str]:
    """The listing's lines, from an initialised-or-not pynvml module. NVML errors become notes or `lost` lines."""
    lines: list[str] = []
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return [f"note NVML unavailable: {exc}"]
    try:
        notes: list[str] = []
        try:
            driver = _text(nv.nvmlSystemGetDriverVersion()).strip()
        except nv.NVMLError:
            driver = ""
        lines.append(f"driver {driver or 'unknown'}")
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            return lines + [f"note nvmlDeviceGetCount: {exc}"]
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as exc:
                lines.append(f"lost #{i} {exc}")
                continue
            dev = _Device(nv, handle, notes, f"#{i}")
            try:
                pci = dev.call("nvmlDeviceGetPciInfo")
                bus = _text(getattr(pci, "busId", "") or getattr(pci, "busIdLegacy", "")) if pci else ""
                gid = normalize_gpu(bus) if bus else None
                if not gid:
                    lines.append(f"lost #{i} no PCI bus id")
                    continue
                dev.gid = gid
                counters = _counters(nv, dev)
                info = _info(dev, bus, driver)
            except _Gone as gone:
                lines.append(f"lost {dev.gid} {gone.why}")
                continue
            lines += [f"gpu {gid} {k} {_num(v)}" for k, v in sorted(counters.items())]
            lines += [f"info {gid} {k} {' '.join(v.split())}" for k, v in sorted(info.items())]
        lines += [f"note {n}" for n in notes]
        return lines
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def nvml_listing() -> list[str]:
    """The listing of this node's GPUs, or one note saying why there is none. Never raises."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return ["note nvidia-ml-py is not installed (pip install nvidia-ml-py): no NVML counters"]
    try:
        return read_nvml(pynvml)
    except Exception as exc:  # an NVML binding that behaves unlike its documentation: a gap, not a failed hook
        return [f"note NVML read failed: {type(exc).__name__}: {exc}"]


def write_listing(path: str, lines: list[str]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def parse_nvml_listing(text: str):
    """(counters by GPU, facts by GPU, lost GPUs, notes, whether NVML answered) of a listing."""
    gpus: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, str]] = {}
    lost: list[str] = []
    notes: list[str] = []
    answered = False
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "driver":
            answered = True
        elif kind == "gpu":
            parts = rest.split()
            if len(parts) == 3:
                try:
                    gpus.setdefault(parts[0], {})[parts[1]] = float(parts[2])
                except ValueError:
                    continue
        elif kind == "info":
            gid, _, kv = rest.partition(" ")
            key, _, value = kv.partition(" ")
            if key and value:
                info.setdefault(gid, {})[key] = value
        elif kind == "lost":
            gid, _, why = rest.partition(" ")
            if gid.startswith("#"):
                notes.append(f"GPU index {gid[1:]} unreachable: {why}")
            else:
                lost.append(gid)
        elif kind == "note":
            notes.append(rest)
    for gid in gpus:
        info.setdefault(gid, {})
    return gpus, info, tuple(g for g in lost if g not in gpus), notes, answered


__all__ = ["read_nvml", "nvml_listing", "write_listing", "parse_nvml_listing"]
