"""The counter snapshots the hooks took at the job's start and end, as the tools wrote them.

hooks/lib.sh `attribution_snapshot` writes, per phase (prolog/, epilog/): nvidia-smi.xml (`nvidia-smi -q -x`, with
nvidia-smi.status and nvidia-smi.err when it failed), sysfs.txt (the InfiniBand port counters and PCIe AER counters,
one `path:value` line each). The collector adds the epilog's pci-topology.txt when the hook left none (each PCI
device's sysfs path with its bridges, what `readlink -f /sys/bus/pci/devices/*` prints): only a job worth a look
needs it, so a clean job's hook does not start a process for it. They travel as text, unparsed: the centre reads
them (collect/telemetry.py parse_snapshot) with the counter rules.

Standard library only, as everything in attribution/node.
"""

from __future__ import annotations

import os

__all__ = ["FILES", "MAX_FILE_BYTES", "pci_topology", "read_snapshots"]

#: The files of one phase's snapshot, as the hooks name them
FILES = ("nvidia-smi.xml", "nvidia-smi.err", "nvidia-smi.status", "sysfs.txt", "pci-topology.txt")
MAX_FILE_BYTES = 8 << 20
PHASES = ("prolog", "epilog")


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[:MAX_FILE_BYTES].decode("utf-8", "replace")


def pci_topology(sysfs_root: str = "") -> str:
    """The resolved path of every entry of <sysfs_root>/sys/bus/pci/devices, one per line, sorted (a device's path
    names its bridges); "" without that folder."""
    devices = os.path.join(sysfs_root + "/sys", "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return ""
    return "".join(os.path.realpath(os.path.join(devices, n)) + "\n" for n in names)


def read_snapshots(folder: str, sysfs_root: str | None = None) -> dict:
    """{"prolog": {file: text}, "epilog": {file: text}, "folder": folder} of the phases that exist; {} when
    neither does. A file over MAX_FILE_BYTES is cut there (the centre says so when it cannot parse it). An epilog
    snapshot with sysfs lines and no pci-topology.txt gets this node's when `sysfs_root` is given (the prefix of
    /sys: "" on a real node)."""
    out: dict = {}
    for phase in PHASES:
        d = os.path.join(folder, phase)
        if not os.path.isdir(d):
            continue
        files = {}
        for name in FILES:
            text = _read(os.path.join(d, name))
            if text is not None:
                files[name] = text
        if sysfs_root is not None and phase == "epilog" and "pci-topology.txt" not in files \
                and files.get("sysfs.txt", "").strip():
            topology = pci_topology(sysfs_root)
            if topology:
                files["pci-topology.txt"] = topology[:MAX_FILE_BYTES]
        if files:  # the prolog makes the epilog's folder: empty, no snapshot was taken there
            out[phase] = files
    if out:
        out["folder"] = folder
    return out
