"""A faked GPU node for the counter snapshots: a sysfs tree under a temporary root (hooks/lib.sh reads
`$ATTRIBUTION_SYSFS_ROOT/sys`) and an `nvidia-smi` that prints a real-format document.

The layout follows the kernel's documentation: /sys/class/infiniband/<dev> links to the HCA's PCI device,
whose infiniband/<dev>/ports/<port>/{counters,hw_counters}/ hold one integer per file
(Documentation/ABI/stable/sysfs-class-infiniband); /sys/bus/pci/devices/<bdf> links into /sys/devices/pci<dom>:<bus>/
with one folder per bridge on the way, and each device holds aer_dev_correctable|fatal|nonfatal, `<name> <count>`
lines ending in a TOTAL_ERR_* line (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats). The nvidia-smi
document is tests/data/telemetry/nvidia-smi-r535-h100.xml with its <gpu> element repeated per GPU.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"
SMI_TEMPLATE = DATA / "nvidia-smi-r535-h100.xml"
#: a DGX H100: GPU i and HCA mlx5_i share a PCIe switch
GPU_BUSES = ("1b", "43", "52", "61", "9d", "c3", "d1", "df")
HCA_BUSES = ("18", "40", "4f", "5e", "9a", "c0", "ce", "dc")

IB_COUNTERS = ("excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
               "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_constraint_errors",
               "port_xmit_data", "port_xmit_discards", "port_xmit_packets", "port_xmit_wait", "symbol_error",
               "VL15_dropped", "multicast_rcv_packets", "multicast_xmit_packets", "unicast_rcv_packets",
               "unicast_xmit_packets")
IB_HW_COUNTERS = ("duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "np_cnp_sent",
                  "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err",
                  "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request",
                  "resp_cqe_error", "resp_cqe_flush_error", "resp_local_length_error", "resp_remote_access_errors",
                  "rnr_nak_retry_err", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests",
                  "rx_read_requests", "rx_write_requests")
AER_NAMES = {
    "aer_dev_correctable": ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr",
                            "HeaderOF", "TOTAL_ERR_COR"),
    "aer_dev_fatal": ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
                      "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
                      "TLPBlockedErr", "PoisonTLPBlocked", "TOTAL_ERR_FATAL"),
    "aer_dev_nonfatal": ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
                         "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
                         "TLPBlockedErr", "PoisonTLPBlocked", "TOTAL_ERR_NONFATAL"),
}


def smi_document(gpus: int = 8, values: dict[int, dict[str, str]] | None = None,
                 timestamp: str = "Tue Oct  1 12:00:02 2026", extra: dict[int, dict[str, str]] | None = None,
                 without: tuple[int, ...] = ()) -> str:
    """The template document with its <gpu> element repeated for `gpus` GPUs; values[i] = {element: text}
    replaces every <element> of GPU i (volatile and aggregate alike); extra changes non-counter elements;
    the GPUs in `without` are left out (gone from the bus: nvidia-smi no longer sees them)."""
    text = SMI_TEMPLATE.read_text()
    head, rest = text.split("\t<gpu id=", 1)
    body, tail = rest.rsplit("\t</gpu>", 1)
    gpu = "\t<gpu id=" + body + "\t</gpu>\n"
    head = re.sub(r"<attached_gpus>\d+</attached_gpus>", f"<attached_gpus>{gpus}</attached_gpus>", head)
    head = re.sub(r"<timestamp>[^<]*</timestamp>", f"<timestamp>{timestamp}</timestamp>", head)
    out = [head]
    head = re.sub(r"<attached_gpus>\d+</attached_gpus>", f"<attached_gpus>{gpus - len(without)}</attached_gpus>",
                  head)
    for i in range(gpus):
        if i in without:
            continue
        bus = GPU_BUSES[i].upper()
        g = gpu.replace("00000000:1B:00.0", f"00000000:{bus}:00.0").replace("<pci_bus>1B</pci_bus>",
                                                                          f"<pci_bus>{bus}</pci_bus>")
        g = g.replace("<minor_number>0</minor_number>", f"<minor_number>{i}</minor_number>")
        g = g.replace("0c2d4e6f8a10", f"0c2d4e6f8a1{i}").replace("1650823012345", f"165082301234{i}")
        for tag, v in {**(extra or {}).get(i, {}), **(values or {}).get(i, {})}.items():
            g = re.sub(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{v}</{tag}>", g)
        out.append(g)
    out.append("\n</nvidia_smi_log>\n")
    return "".join(out)


def _aer_text(file: str, counts: dict[str, int] | None = None) -> str:
    counts = dict(counts or {})
    names = AER_NAMES[file]
    total = sum(v for k, v in counts.items() if k != names[-1])
    lines = [f"{n} {counts.get(n, 0)}" for n in names[:-1]] + [f"{names[-1]} {total}"]
    return "\n".join(lines) + "\n"


class FakeNode:
    """A node with `gpus` GPUs and `hcas` HCAs (one port each) under `root`; `nvidia_smi` is the fake tool."""

    def __init__(self, root: Path, gpus: int = 8, hcas: int = 8) -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"
        self.gpus, self.hcas = gpus, hcas
        self.smi_file = self.root / "nvidia-smi.out.xml"
        self.nvidia_smi = self.root / "bin" / "nvidia-smi"
        self.devices: dict[str, Path] = {}  # bdf -> its folder under sys/devices
        self.gpu_bdf = [f"0000:{GPU_BUSES[i]}:00.0" for i in range(gpus)]
        self.hca_bdf = [f"0000:{HCA_BUSES[i]}:00.0" for i in range(max(gpus, hcas))][:hcas]
        self._build()
        self.set_smi()

    # -- building -------------------------------------------------------------------------------------------
    def _device(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for f in AER_NAMES:
            (path / f).write_text(_aer_text(f))
        bdf = path.name
        self.devices[bdf] = path
        link = self.sys / "bus" / "pci" / "devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            os.symlink(os.path.relpath(path, link.parent), link)

    def _build(self) -> None:
        for i in range(max(self.gpus, self.hcas)):
            h = int(HCA_BUSES[i], 16)
            rc = f"{h - 3:02x}"
            port = self.sys / "devices" / f"pci0000:{rc}" / f"0000:{rc}:01.0"
            up = port / f"0000:{h - 2:02x}:00.0"
            self._device(port)
            self._device(up)
            if i < self.hcas:
                hca = up / f"0000:{h - 1:02x}:00.0" / self.hca_bdf[i]
                self._device(hca.parent)
                self._device(hca)
                dev = f"mlx5_{i}"
                ports = hca / "infiniband" / dev / "ports" / "1"
                for group, names in (("counters", IB_COUNTERS), ("hw_counters", IB_HW_COUNTERS)):
                    (ports / group).mkdir(parents=True, exist_ok=True)
                    for n in names:
                        (ports / group / n).write_text("10\n" if n == "lifespan" else "0\n")
                cls = self.sys / "class" / "infiniband" / dev
                cls.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(os.path.relpath(hca / "infiniband" / dev, cls.parent), cls)
            if i < self.gpus:
                gpu = up / f"0000:{h - 1:02x}:01.0" / self.gpu_bdf[i]
                self._device(gpu.parent)
                self._device(gpu)
        self.nvidia_smi.parent.mkdir(parents=True, exist_ok=True)
        # a stand-in for nvidia-smi -q -x: prints a real-format document, or fails as a lost GPU makes it fail
        self.smi_failure = self.root / "nvidia-smi.fails"
        self.nvidia_smi.write_text(
            "#!/bin/sh\n"
            f"if [ -r '{self.smi_failure}' ]; then read -r rc msg < '{self.smi_failure}'; echo \"$msg\"; exit $rc; fi\n"
            f"exec /bin/cat '{self.smi_file}'\n")
        self.nvidia_smi.chmod(0o755)

    # -- changing counters ----------------------------------------------------------------------------------
    def set_smi(self, values: dict[int, dict[str, str]] | None = None, **kw) -> None:
        kw.setdefault("without", tuple(sorted(getattr(self, "lost", ()))))
        self.smi_file.write_text(smi_document(self.gpus, values, **kw))

    def ib_counter(self, hca: int, name: str, value: int, group: str = "counters") -> None:
        path = self.devices[self.hca_bdf[hca]] / "infiniband" / f"mlx5_{hca}" / "ports" / "1" / group / name
        path.write_text(f"{value}\n")

    def aer(self, bdf: str, file: str, counts: dict[str, int]) -> None:
        (self.devices[bdf] / file).write_text(_aer_text(file, counts))

    def bridge_of_gpu(self, i: int) -> str:
        return self.devices[self.gpu_bdf[i]].parent.name

    def smi_fails(self, status: int, message: str) -> None:
        """nvidia-smi prints `message` and exits `status` (e.g. 15 and "Unable to determine the device handle for
        GPU 0000:61:00.0: Unknown Error", as with a GPU that fell off the bus)."""
        self.smi_failure.write_text(f"{status} {message}\n")

    def lose_gpu(self, i: int) -> None:
        """GPU i falls off the bus and the kernel removes it: nvidia-smi lists the others, its PCI function
        leaves /sys/bus/pci/devices (the link and the folder under sys/devices go)."""
        self.lost = getattr(self, "lost", set()) | {i}
        self.set_smi()
        link = self.sys / "bus" / "pci" / "devices" / self.gpu_bdf[i]
        if link.is_symlink():
            link.unlink()

    def reset(self) -> None:
        """Every counter back to the state the node was built with (a fresh node)."""
        self.smi_failure.unlink(missing_ok=True)
        for i in sorted(getattr(self, "lost", set())):
            link = self.sys / "bus" / "pci" / "devices" / self.gpu_bdf[i]
            os.symlink(os.path.relpath(self.devices[self.gpu_bdf[i]], link.parent), link)
        self.lost = set()
        self.set_smi()
        for bdf, d in self.devices.items():
            for f in AER_NAMES:
                (d / f).write_text(_aer_text(f))
        for i in range(self.hcas):
            for group, names in (("counters", IB_COUNTERS), ("hw_counters", IB_HW_COUNTERS)):
                for n in names:
                    self.ib_counter(i, n, 10 if n == "lifespan" else 0, group)

    def counter_path(self, hca: int, name: str, group: str = "counters") -> Path:
        return self.devices[self.hca_bdf[hca]] / "infiniband" / f"mlx5_{hca}" / "ports" / "1" / group / name

    def hook_env(self) -> str:
        """hook.env lines pointing the hooks at this node."""
        return f"ATTRIBUTION_SYSFS_ROOT={self.root}\nATTRIBUTION_NVIDIA_SMI={self.nvidia_smi}\n"
