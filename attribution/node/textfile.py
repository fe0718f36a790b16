"""The spool's depth for node_exporter's textfile collector (``attribution_spool.prom``).

The hooks write when they last ran (hooks/lib.sh, ``attribution_hook_<hook>.prom``); the spool only changes when
the node agent writes or flushes it, so the agent writes this file after doing either. The folder is
``$ATTRIBUTION_TEXTFILE_DIR`` (set in hook.env; ``off`` writes nothing; unset or ``auto``: node_exporter's usual
``/var/lib/node_exporter/textfile_collector`` when it exists). Written to a dot-file and renamed, as the collector
expects. Never raises: metrics never cost a report.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from attribution.node.spool import SUFFIX

__all__ = ["DEFAULT_DIR", "render_spool", "textfile_dir", "write_spool"]

DEFAULT_DIR = Path("/var/lib/node_exporter/textfile_collector")
NAME = "attribution_spool.prom"


def textfile_dir(environ=os.environ) -> Path | None:
    value = environ.get("ATTRIBUTION_TEXTFILE_DIR", "auto").strip()
    if value == "off" or value == "":
        return None
    path = DEFAULT_DIR if value == "auto" else Path(value)
    return path if path.is_dir() else None


def _spooled(folder: Path) -> list[os.stat_result]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    out = []
    for e in entries:
        if e.name.endswith(SUFFIX) and not e.name.startswith("."):
            try:
                out.append(e.stat(follow_symlinks=False))
            except OSError:
                pass
    return out


def render_spool(spool: Path, now: float | None = None) -> str:
    """The metrics text for the spool folder `spool` (pending files, their bytes, the oldest one's age; files
    moved aside to bad/)."""
    now = time.time() if now is None else now
    pending = _spooled(spool)
    bad = _spooled(spool / "bad")
    oldest = min((s.st_mtime for s in pending), default=None)
    lines = [
        "# HELP attribution_spool_pending_files Reports spooled on this node and not yet stored.",
        "# TYPE attribution_spool_pending_files gauge",
        f"attribution_spool_pending_files {len(pending)}",
        "# HELP attribution_spool_pending_bytes Bytes of those reports.",
        "# TYPE attribution_spool_pending_bytes gauge",
        f"attribution_spool_pending_bytes {sum(s.st_size for s in pending)}",
        "# HELP attribution_spool_oldest_pending_age_seconds Age of the oldest pending report (0 when none).",
        "# TYPE attribution_spool_oldest_pending_age_seconds gauge",
        f"attribution_spool_oldest_pending_age_seconds {max(0.0, now - oldest) if oldest is not None else 0:.3f}",
        "# HELP attribution_spool_bad_files Reports moved aside to bad/ (refused for good; read the .reason files).",
        "# TYPE attribution_spool_bad_files gauge",
        f"attribution_spool_bad_files {len(bad)}",
        "# HELP attribution_spool_updated_timestamp_seconds When the node agent last wrote this file.",
        "# TYPE attribution_spool_updated_timestamp_seconds gauge",
        f"attribution_spool_updated_timestamp_seconds {now:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write_spool(spool: Path, environ=os.environ) -> Path | None:
    """Write attribution_spool.prom into the textfile folder; the file written, or None (off, or it failed)."""
    try:
        folder = textfile_dir(environ)
        if folder is None:
            return None
        tmp = folder / f".{NAME}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # node_exporter runs as another user; the hooks' umask is 077
            os.write(fd, render_spool(spool).encode())
        finally:
            os.close(fd)
        final = folder / NAME
        os.replace(tmp, final)
        return final
    except OSError:
        return None
