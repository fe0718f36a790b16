"""A real, throw-away Prometheus server for tests (Debian's `prometheus` package; stdlib only).

History is backfilled before the server starts: the OpenMetrics text (a timestamp in seconds on every sample, a
final `# EOF`) goes through `promtool tsdb create-blocks-from openmetrics` into the data dir, and the server runs
with a 100-year retention so fixed fixture times stay queryable (docs/slurm.md section 2). Nothing is
scraped. The server listens on 127.0.0.1 on a free port and is stopped by its PID.

    with PrometheusServer(tmp_path, openmetrics_text) as prom:
        requests to prom.url + "/api/v1/query_range"

`install()` runs `apt-get install -y --no-install-recommends prometheus` when the binaries are missing (root only).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from . import apt

__all__ = ["PrometheusServer", "PrometheusHarnessError", "openmetrics"]

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


class PrometheusHarnessError(RuntimeError):
    pass


def openmetrics(series: list[tuple[str, dict, list[tuple[float, float]]]], types: dict | None = None) -> str:
    """OpenMetrics text for [(metric, labels, [(unix seconds, value), ...])], '# EOF' terminated."""
    lines = []
    seen = set()
    for name, _, _ in series:
        if name not in seen:
            seen.add(name)
            lines.append(f"# TYPE {name} {(types or {}).get(name, 'gauge')}")
    by_name: dict[str, list[str]] = {}
    for name, labels, samples in series:
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for t, v in samples:
            ts = str(int(t)) if float(t).is_integer() else f"{t:.3f}"
            by_name.setdefault(name, []).append(f"{name}{{{lab}}} {float(v)!r} {ts}")
    out = []
    for line in lines:  # OpenMetrics wants each metric family's samples right after its TYPE line
        name = line.split()[2]
        out.append(line)
        out.extend(by_name.get(name, []))
    return "\n".join(out) + "\n# EOF\n"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    def __init__(self, base_dir: Path, backfill: str | None = None, start_timeout: float = 30.0) -> None:
        self.base_dir = Path(base_dir)
        self.backfill = backfill
        self.start_timeout = start_timeout
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def missing() -> list[str]:
        return [p for p in (PROMETHEUS, PROMTOOL) if not os.access(p, os.X_OK)]

    def install(self) -> None:
        if not self.missing():
            return
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise PrometheusHarnessError(f"{self.missing()} missing and cannot apt-get install prometheus (not root)")
        r = apt.install(["prometheus"])
        if r.returncode != 0 or self.missing():
            raise PrometheusHarnessError(f"{r.command} failed: {r.output[-2000:]}")

    def start(self) -> None:
        b = self.base_dir
        data = b / "data"
        data.mkdir(parents=True, exist_ok=True)
        (b / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        if self.backfill:
            om = b / "backfill.om"
            om.write_text(self.backfill)
            r = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise PrometheusHarnessError(f"promtool backfill failed: {(r.stdout + r.stderr)[-2000:]}")
        last = ""
        for _ in range(5):  # the free port may be taken between choosing it and binding it
            self.port = _free_port()
            log = open(b / "prometheus.log", "ab")
            try:
                self._proc = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={b / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                     "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{self.port}"],
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
            finally:
                log.close()
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline and self._proc.poll() is None:
                try:
                    with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
                time.sleep(0.05)
            last = (b / "prometheus.log").read_text(errors="replace")[-2000:]
            self.stop()
            if "address already in use" not in last:
                break
        raise PrometheusHarnessError(f"prometheus did not become ready:\n{last}")

    def stop(self) -> None:
        p, self._proc = self._proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)

    def __enter__(self) -> "PrometheusServer":
        self.install()
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
