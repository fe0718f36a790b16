"""The sysfs counter files: InfiniBand port counters, PCIe AER counters, the PCI topology, and which counter sat
at the top of its width. Pure (text in, values out).

`/sys/class/infiniband/<dev>/ports/<port>/counters/` are the IBA PortCounters the kernel reads through a PMA
query (drivers/infiniband/core/sysfs.c `PORT_PMA_ATTR`): each has a fixed width (link_downed 8 bits, symbol_error
16, ...) and saturates at its maximum instead of wrapping. On a device with extended width (mlx5) the data and
packet counters of that folder are the 64-bit PortCountersExtended; mlx4 adds `counters_ext/` with `*_64` forms;
`hw_counters/` are the driver's own 64-bit counters. Where a 64-bit form of a counter exists it is the value read.
"""

from __future__ import annotations

from typing import Mapping

AER_FILES = ("aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal")
IB_GROUPS = ("counters", "hw_counters", "counters_ext")
#: bits of each PortCounters file (Linux drivers/infiniband/core/sysfs.c PORT_PMA_ATTR(name, counter, width, ...))
PORT_COUNTER_BITS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16, "port_xmit_data": 32, "port_rcv_data": 32,
    "port_xmit_packets": 32, "port_rcv_packets": 32, "port_xmit_wait": 32,
}
#: the 64-bit forms of a PortCounters file, preferred when present (mlx4's counters_ext/)
WIDE_FORMS = {
    "port_xmit_data": ("counters_ext/port_xmit_data_64",), "port_rcv_data": ("counters_ext/port_rcv_data_64",),
    "port_xmit_packets": ("counters_ext/port_xmit_packets_64",),
    "port_rcv_packets": ("counters_ext/port_rcv_packets_64",),
}


def prefer_wide(values: dict[str, float]) -> dict[str, float]:
    """A port's counters with each 32-bit PortCounters value replaced by its 64-bit form where the driver has one."""
    out = dict(values)
    for name, forms in WIDE_FORMS.items():
        for f in forms:
            if f in values:
                out[f"counters/{name}"] = values[f]
                break
    return out


def saturated(values: Mapping[str, float]) -> dict[str, int]:
    """{counter: bits} of the port's PortCounters files that sit at their width's maximum (a value above the
    32-bit maximum is a 64-bit extended counter: not saturated)."""
    out: dict[str, int] = {}
    for key, v in values.items():
        group, _, name = key.partition("/")
        bits = PORT_COUNTER_BITS.get(name) if group == "counters" else None
        if bits is not None and v == (1 << bits) - 1:
            out[key] = bits
    return out


def parse_aer(text: str) -> dict[str, float]:
    """An aer_dev_* file: `<name> <count>` lines and a TOTAL_ERR_* line (sysfs-bus-pci-devices-aer_stats)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = float(parts[1])
    return out


def aer_total(values: Mapping[str, float]) -> float:
    totals = [v for k, v in values.items() if k.startswith("TOTAL_ERR")]
    return totals[0] if totals else sum(values.values())


def parse_infiniband_listing(text: str) -> dict[str, dict[str, float]]:
    """`grep -H . .../infiniband/<dev>/ports/<port>/{counters,hw_counters,counters_ext}/<name>` output: counters by
    port, 64-bit forms preferred."""
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
        if i < 1 or len(parts) != i + 4 or parts[i + 2] not in IB_GROUPS:
            continue
        port = f"{parts[i - 1]}/{parts[i + 1]}"
        out.setdefault(port, {})[f"{parts[i + 2]}/{parts[i + 3]}"] = float(value.strip())
    return {p: prefer_wide(v) for p, v in out.items()}


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
    return {bdf: {f: aer_total(vals) for f, vals in files.items()} for bdf, files in raw.items()}


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
