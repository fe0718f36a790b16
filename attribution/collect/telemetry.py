"""Counter snapshots (docs/bundle.md "Telemetry snapshots"): parsing, separate from reading.

A snapshot is what a node's GPUs and NICs counted at one moment: `nvidia-smi -q -x` (collect/smi_xml.py), the
InfiniBand port counters and hw_counters under /sys/class/infiniband/<dev>/ports/<port>/ and the AER counters
under /sys/bus/pci/devices/<bdf>/ (collect/sysfs_counters.py). `parse_snapshot` is pure: it takes the snapshot's
files as {file name: text} (the compact listing form the hooks write: nvidia-smi.xml, nvidia-smi.err,
nvidia-smi.status, sysfs.txt, pci-topology.txt), which is what a node agent sends; `read_snapshot` reads
one snapshot folder, in that form or in the bundle's tree layout (infiniband/, pci/ folders).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from attribution import frozen
from attribution.collect.smi_xml import (TelemetryError, gpu_counters, named_gpus, parse_nvidia_smi_xml,
                                         split_document, unobserved, xml_tags_of)
from attribution.collect.sysfs_counters import (AER_FILES, IB_GROUPS, aer_total, parse_aer, parse_aer_listing,
                                                parse_infiniband_listing, parse_pci_topology, prefer_wide,
                                                saturated)
from attribution.samples import Snapshot

NVIDIA_SMI_XML = "nvidia-smi.xml"
#: written by the hooks only when nvidia-smi failed: its exit status, and what it printed on stderr
NVIDIA_SMI_STATUS = "nvidia-smi.status"
NVIDIA_SMI_ERR = "nvidia-smi.err"
INFINIBAND_DIR = "infiniband"
PCI_DIR = "pci"
#: The hooks' compact form of the two sysfs trees (`grep -H` lines: `<path>:<value>` per InfiniBand counter file,
#: `<path>:TOTAL_ERR_FATAL <n>` per AER file), and the PCI topology (`readlink -f` of every device).
SYSFS_LISTING = "sysfs.txt"
PCI_TOPOLOGY = "pci-topology.txt"
#: the files parse_snapshot reads
SNAPSHOT_FILES = (NVIDIA_SMI_XML, NVIDIA_SMI_ERR, NVIDIA_SMI_STATUS, SYSFS_LISTING, PCI_TOPOLOGY)
MAX_FILE_BYTES = 8 << 20


def _status(text: str | None) -> int:
    try:
        return int(text.split()[0]) if text else 0
    except (ValueError, IndexError):
        return 0


# -- one snapshot from its files ------------------------------------------------------------------------------


def parse_snapshot(files: Mapping[str, str], phase: str, shown: str, memo: dict | None = None) -> Snapshot | None:
    """The snapshot in `files` ({file name: text}, the compact listing form); None when `files` is empty.
    Unreadable parts become problems; what nvidia-smi printed beside its document becomes `messages`. `memo`:
    shared by a report's two phases, an unchanged nvidia-smi document is parsed once (smi_xml)."""
    if not files:
        return None
    return _parse(files, phase, shown, memo)


def _gpu_part(files: Mapping[str, str], shown: str, memo: dict | None = None):
    """(gpus, info, lost, present, problems, gaps, messages) of the GPU tool's files."""
    gpus: dict = {}
    info: dict = {}
    lost: tuple[str, ...] = ()
    present: list[str] = []
    problems: list[str] = []
    gaps: list[str] = []
    messages: tuple[str, ...] = ()
    status = _status(files.get(NVIDIA_SMI_STATUS))
    if NVIDIA_SMI_XML in files or status:
        document, stray = split_document(files.get(NVIDIA_SMI_XML) or "")
        err = tuple(ln.strip() for ln in (files.get(NVIDIA_SMI_ERR) or "").splitlines() if ln.strip())
        messages = err + stray
        try:
            gpus, info = parse_nvidia_smi_xml(document or "\n".join(stray), f"{shown}/{NVIDIA_SMI_XML}", memo)
            present.append("nvidia-smi")
            if status:
                gaps.append(f"nvidia-smi exited {status}; its document was read"
                            + (f": {messages[0]}" if messages else ""))
        except TelemetryError:
            if not status:
                raise
            first = messages[0] if messages else ""
            problems.append(f"{shown}: nvidia-smi exited {status}" + (f": {first}" if first else ""))
        if status:
            lost = tuple(g for g in named_gpus("\n".join(messages)) if g not in gpus)
    return gpus, info, lost, present, problems, gaps, messages


def _parse(files: Mapping[str, str], phase: str, shown: str, memo: dict | None = None) -> Snapshot:
    big = [n for n, text in files.items() if len(text) > MAX_FILE_BYTES]
    problems = [f"{shown}/{n}: larger than {MAX_FILE_BYTES} bytes" for n in big]
    files = {n: text for n, text in files.items() if n not in big}
    try:
        gpus, info, lost, present, problems_gpu, gaps, messages = _gpu_part(files, shown, memo)
        problems.extend(problems_gpu)
    except TelemetryError as exc:  # a document that is not XML from a run that did not fail
        gpus, info, lost, present, gaps, messages = {}, {}, (), [], [], ()
        problems.append(str(exc))
    ports: dict = {}
    pci: dict = {}
    listing = files.get(SYSFS_LISTING)
    if listing is not None:
        ports, pci = parse_infiniband_listing(listing), parse_aer_listing(listing)
        present += [part for part, have in (("infiniband", ports), ("pci", pci)) if have]
    parents = parse_pci_topology(files[PCI_TOPOLOGY]) if PCI_TOPOLOGY in files else {}
    return Snapshot(phase, _freeze(gpus), _freeze(info), _freeze(ports), _freeze(pci),
                    MappingProxyType(dict(parents)), tuple(present), tuple(problems), lost, tuple(gaps),
                    tuple(messages))


# -- reading one snapshot folder ------------------------------------------------------------------------------


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise TelemetryError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", "replace")


def read_snapshot(folder: Path, phase: str, shown: str | None = None) -> Snapshot | None:
    """The snapshot in `folder` (None when the folder does not exist): its files in the compact listing form
    through parse_snapshot, and the bundle's tree layout (infiniband/, pci/) when there is no sysfs.txt."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    shown = shown or str(folder)
    files: dict[str, str] = {}
    problems: list[str] = []
    for name in SNAPSHOT_FILES:
        path = folder / name
        try:
            if path.is_file():
                files[name] = _read(path)
        except (OSError, TelemetryError) as exc:
            problems.append(str(exc))
    if PCI_TOPOLOGY not in files and (folder / PCI_DIR / "topology").is_file():
        files[PCI_TOPOLOGY] = _read(folder / PCI_DIR / "topology")
    snap = _parse(files, phase, shown)
    if SYSFS_LISTING in files:
        return frozen.replace(snap, problems=tuple(problems) + snap.problems) if problems else snap
    ports: dict = {}
    pci: dict = {}
    try:
        if (folder / INFINIBAND_DIR).is_dir():
            ports = _infiniband_tree(folder / INFINIBAND_DIR)
        if (folder / PCI_DIR).is_dir():
            pci = _pci_tree(folder / PCI_DIR)
    except OSError as exc:
        problems.append(f"{shown}: {exc}")
    present = list(snap.present) + [part for part, have in (("infiniband", ports), ("pci", pci)) if have]
    return frozen.replace(snap, ports=_freeze(ports), pci=_freeze(pci), present=tuple(present),
                          problems=tuple(problems) + snap.problems)


def _infiniband_tree(root: Path) -> dict[str, dict[str, float]]:
    """infiniband/<device>/<port>/{counters,hw_counters,counters_ext}/<name>, one integer per file (64-bit forms
    preferred)."""
    out: dict[str, dict[str, float]] = {}
    for dev in sorted(p for p in root.iterdir() if p.is_dir()):
        for port in sorted(p for p in dev.iterdir() if p.is_dir()):
            for group in IB_GROUPS:
                gdir = port / group
                if not gdir.is_dir():
                    continue
                for f in sorted(gdir.iterdir()):
                    v = _read(f).strip() if f.is_file() else ""
                    if v.isdigit():
                        out.setdefault(f"{dev.name}/{port.name}", {})[f"{group}/{f.name}"] = float(v)
    return {p: prefer_wide(v) for p, v in out.items()}


def _pci_tree(root: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for dev in sorted(p for p in root.iterdir() if p.is_dir()):
        for name in AER_FILES:
            f = dev / name
            if f.is_file():
                out.setdefault(dev.name, {})[name] = aer_total(parse_aer(_read(f)))
    return out


def _freeze(d: Mapping) -> Mapping:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in d.items()})


def snapshot_to_json(s: Snapshot) -> dict:
    return {"phase": s.phase, "gpus": {k: dict(v) for k, v in s.gpus.items()},
            "gpu_info": {k: dict(v) for k, v in s.gpu_info.items()},
            "ports": {k: dict(v) for k, v in s.ports.items()}, "pci": {k: dict(v) for k, v in s.pci.items()},
            "parents": {k: list(v) for k, v in s.parents.items()}, "present": list(s.present),
            "problems": list(s.problems), "lost": list(s.lost), "gaps": list(s.gaps),
            "messages": list(s.messages)}


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
            tuple(str(x) for x in d.get("lost") or ()), tuple(str(x) for x in d.get("gaps") or ()),
            tuple(str(x) for x in d.get("messages") or ()))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TelemetryError(f"malformed telemetry snapshot: {exc}") from None


__all__ = ["Snapshot", "TelemetryError", "parse_nvidia_smi_xml", "gpu_counters", "parse_aer",
           "parse_infiniband_listing", "parse_aer_listing", "parse_pci_topology", "parse_snapshot",
           "read_snapshot", "snapshot_to_json", "snapshot_from_json", "xml_tags_of", "named_gpus", "AER_FILES",
           "coverage_of", "unobserved_of"]


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
    blind = unobserved_of(prolog, epilog)
    notes.extend(blind)
    reason = None
    if blind and status == "ok":
        status, reason = "missing", f"{len(blind)} counter(s) or GPU part(s) could not be observed (notes)"
    counted = sum(len(s.gpus) + len(s.ports) + len(s.pci) for s in have)
    return Coverage("telemetry", node, status, lines=counted, reason=reason, file=shown, notes=tuple(notes))


def unobserved_of(prolog: Snapshot | None, epilog: Snapshot | None) -> list[str]:
    """What the two snapshots could not observe, in words: GPUs whose memory errors are not counted (ECC off or
    not reported, a vGPU guest, MIG without volatile counts) and port counters at their width's maximum (a change
    of a saturated counter cannot be seen)."""
    out: list[str] = []
    last = epilog if epilog is not None and epilog.gpus else prolog
    if last is not None:
        for gpu in sorted(last.gpus):
            out.extend(unobserved(gpu, last.gpus[gpu], last.gpu_info.get(gpu, {})))
    before = prolog.ports if prolog is not None else {}
    after = epilog.ports if epilog is not None else {}
    for port in sorted(set(before) | set(after)):
        top_before, top_after = saturated(before.get(port, {})), saturated(after.get(port, {}))
        for c in sorted(set(top_before) | set(top_after)):
            bits = top_before.get(c) or top_after[c]
            top = (1 << bits) - 1
            if c in top_before:
                when = "at the prolog: a change during the job could not be seen" if port in after else \
                    "(saturated: a change could not be seen)"
            else:
                when = "at the epilog: the increase shown is a lower bound" if port in before else \
                    "(saturated: a change could not be seen)"
            out.append(f"port {port} {c} at its {bits}-bit maximum {top} {when}")
    return out


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
