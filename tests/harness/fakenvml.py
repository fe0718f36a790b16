"""A fake NVML library under the real pynvml module (nvidia-ml-py): a node's GPUs without a GPU.

pynvml is a thin ctypes layer over libnvidia-ml: every function looks its C entry point up in `pynvml.nvmlLib`
(`nvmlDeviceGetCount_v2`, `nvmlDeviceGetMemoryErrorCounter`, ...) and turns a non-zero return code into
`NVMLError(code)`. `install(gpus)` puts this fake where the loaded library would be, so the module under test is
the real one, with its argument marshalling, its string conversion and its exception classes; only the C side is
faked, after the NVML API reference (docs.nvidia.com/deploy/nvml-api): each entry point takes the documented
arguments (values, `byref` out-parameters, buffers) and returns an nvmlReturn_t. A function the fake does not
define is NVML_ERROR_FUNCTION_NOT_FOUND, as with an old driver.

`python -m tests.harness.fakenvml SPEC.json ARGS...` runs `attribution-node ARGS...` with the fake installed from
a JSON spec (what the hooks' ATTRIBUTION_BIN points at in the hook tests).
"""

from __future__ import annotations

import ctypes
import json
import sys
from dataclasses import dataclass, field

SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, INSUFFICIENT_SIZE, GPU_IS_LOST, UNKNOWN = 0, 2, 3, 7, 15, 999
VOLATILE, AGGREGATE = 0, 1
CORRECTED, UNCORRECTED = 0, 1
DRAM, SRAM = 2, 7


@dataclass
class FakeGpu:
    bus_id: str                      # as NVML prints it: 00000000:3B:00.0
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    serial: str = "1650823012345"
    name: str = "NVIDIA H100 80GB HBM3"
    minor: int = 0
    #: (error type, counter type, location) -> count; a location absent here is NOT_SUPPORTED (pre-R470)
    ecc: dict = field(default_factory=dict)
    totals: dict = field(default_factory=dict)  # (error type, counter type) -> count
    remapped: tuple | None = (0, 0, 0, 0)       # corr, unc, pending, failure; None: not supported (pre-A100)
    retired: dict = field(default_factory=lambda: {0: [], 1: []})  # cause -> page addresses
    retired_pending: int = 0
    replays: int = 0
    recovery_action: int | None = 0             # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; None: unknown field
    handle_error: int = SUCCESS                 # nvmlDeviceGetHandleByIndex fails with this (a lost GPU)
    query_error: int = SUCCESS                  # every query on the handle fails with this


def h100(i: int, bus: str) -> FakeGpu:
    ecc = {(e, c, loc): 0 for e in (CORRECTED, UNCORRECTED) for c in (VOLATILE, AGGREGATE) for loc in (DRAM, SRAM)}
    ecc[(CORRECTED, AGGREGATE, DRAM)] = 4
    return FakeGpu(bus_id=f"00000000:{bus.upper()}:00.0", uuid=f"GPU-5e0c1a2b-7d3f-4e8a-9b61-0c2d4e6f8a1{i}",
                   serial=f"165082301234{i}", minor=i, ecc=ecc)


def v100(i: int, bus: str) -> FakeGpu:
    return FakeGpu(bus_id=f"00000000:{bus.upper()}:00.0", uuid=f"GPU-1d2e3f40-0000-0000-0000-00000000000{i}",
                   name="Tesla V100-SXM2-32GB", minor=i, ecc={},
                   totals={(e, c): 0 for e in (CORRECTED, UNCORRECTED) for c in (VOLATILE, AGGREGATE)},
                   remapped=None, recovery_action=None)


def _out(arg):
    """The object behind a `byref(...)` out-parameter."""
    return arg._obj


def _val(arg) -> int:
    return arg.value if hasattr(arg, "value") else int(arg)


class FakeNvmlLibrary:
    driver = "535.183.01"

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        raise AttributeError(name)  # pynvml: NVML_ERROR_FUNCTION_NOT_FOUND

    # -- handles ----------------------------------------------------------------------------------------------
    def _gpu(self, handle) -> FakeGpu:
        return self.gpus[ctypes.cast(handle, ctypes.c_void_p).value - 1]

    def _query(self, handle) -> tuple[FakeGpu, int]:
        g = self._gpu(handle)
        return g, g.query_error

    # -- system -------------------------------------------------------------------------------------------------
    def nvmlInitWithFlags(self, flags) -> int:
        return SUCCESS

    def nvmlShutdown(self) -> int:
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buf, size) -> int:
        buf.value = self.driver.encode()
        return SUCCESS

    def nvmlDeviceGetCount_v2(self, count) -> int:
        _out(count).value = len(self.gpus)
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index, device) -> int:
        i = _val(index)
        if i >= len(self.gpus):
            return INVALID_ARGUMENT
        if self.gpus[i].handle_error:
            return self.gpus[i].handle_error
        ptr = _out(device)
        ctypes.cast(ctypes.pointer(ptr), ctypes.POINTER(ctypes.c_void_p))[0] = i + 1
        return SUCCESS

    # -- identity -----------------------------------------------------------------------------------------------
    def nvmlDeviceGetPciInfo_v3(self, handle, info) -> int:
        g, err = self._query(handle)
        if err:
            return err
        o = _out(info)
        o.busId = g.bus_id.encode()
        o.busIdLegacy = g.bus_id[4:].encode()
        o.domain, o.bus, o.device = 0, int(g.bus_id.split(":")[1], 16), 0
        return SUCCESS

    def _string(self, handle, buf, text: str) -> int:
        g, err = self._query(handle)
        if err:
            return err
        buf.value = text.encode()
        return SUCCESS

    def nvmlDeviceGetUUID(self, handle, buf, size) -> int:
        return self._string(handle, buf, self._gpu(handle).uuid)

    def nvmlDeviceGetSerial(self, handle, buf, size) -> int:
        return self._string(handle, buf, self._gpu(handle).serial)

    def nvmlDeviceGetName(self, handle, buf, size) -> int:
        return self._string(handle, buf, self._gpu(handle).name)

    def nvmlDeviceGetMinorNumber(self, handle, minor) -> int:
        g, err = self._query(handle)
        if err:
            return err
        _out(minor).value = g.minor
        return SUCCESS

    # -- memory errors --------------------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryErrorCounter(self, handle, error_type, counter_type, location, count) -> int:
        g, err = self._query(handle)
        if err:
            return err
        key = (_val(error_type), _val(counter_type), _val(location))
        if key not in g.ecc:
            return NOT_SUPPORTED
        _out(count).value = g.ecc[key]
        return SUCCESS

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, count) -> int:
        g, err = self._query(handle)
        if err:
            return err
        key = (_val(error_type), _val(counter_type))
        if g.totals:
            value = g.totals.get(key)
        else:
            value = sum(v for (e, c, _), v in g.ecc.items() if (e, c) == key) if g.ecc else None
        if value is None:
            return NOT_SUPPORTED
        _out(count).value = value
        return SUCCESS

    def nvmlDeviceGetRemappedRows(self, handle, corr, unc, pending, failure) -> int:
        g, err = self._query(handle)
        if err:
            return err
        if g.remapped is None:
            return NOT_SUPPORTED
        for out, v in zip((corr, unc, pending, failure), g.remapped):
            _out(out).value = v
        return SUCCESS

    def nvmlDeviceGetRetiredPages(self, handle, cause, count, pages) -> int:
        """Two calls, as documented: with no buffer it says how many; then it fills the buffer."""
        g, err = self._query(handle)
        if err:
            return err
        have = g.retired.get(_val(cause), [])
        c = _out(count)
        if pages is None:
            c.value = len(have)
            return INSUFFICIENT_SIZE if have else SUCCESS
        if c.value < len(have):
            c.value = len(have)
            return INSUFFICIENT_SIZE
        for i, addr in enumerate(have):
            pages[i] = addr
        c.value = len(have)
        return SUCCESS

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle, pending) -> int:
        g, err = self._query(handle)
        if err:
            return err
        _out(pending).value = g.retired_pending
        return SUCCESS

    def nvmlDeviceGetPcieReplayCounter(self, handle, value) -> int:
        g, err = self._query(handle)
        if err:
            return err
        _out(value).value = g.replays
        return SUCCESS

    def nvmlDeviceGetFieldValues(self, handle, count, values) -> int:
        g, err = self._query(handle)
        if err:
            return err
        arr = _out(values)
        for i in range(_val(count)):
            v = arr[i]
            if v.fieldId == 230 and g.recovery_action is not None:  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
                v.nvmlReturn = SUCCESS
                v.value.uiVal = g.recovery_action
            else:
                v.nvmlReturn = NOT_SUPPORTED
        return SUCCESS


def install(gpus: list[FakeGpu]):
    """The real pynvml module with this fake as its loaded library; returns (pynvml, the fake)."""
    import pynvml

    lib = FakeNvmlLibrary(gpus)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = lib
    return pynvml, lib


def uninstall() -> None:
    import pynvml

    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = None


def gpus_from_spec(spec: list[dict]) -> list[FakeGpu]:
    out = []
    for i, g in enumerate(spec):
        base = (v100 if g.get("model") == "v100" else h100)(i, g["bus"])
        for key, value in g.get("ecc", {}).items():  # "uncorrected/volatile/dram": 2
            e, c, loc = key.split("/")
            base.ecc[({"corrected": 0, "uncorrected": 1}[e], {"volatile": 0, "aggregate": 1}[c],
                      {"dram": 2, "sram": 7}[loc])] = value
        if "remapped" in g:
            base.remapped = tuple(g["remapped"])
        base.handle_error = g.get("handle_error", 0)
        out.append(base)
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        install(gpus_from_spec(json.load(f)))
    from attribution.node.agent import main

    sys.exit(main(sys.argv[2:]))
