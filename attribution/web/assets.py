"""The chart library (Vega, Vega-Lite and vega-embed, reports/vega.py) served once to each browser.

The chart pages load it from `/ui/assets/vega-<digest>.js`: the URL names its content, so the browser keeps it
for a year and a new version of the library is a new URL; sent gzip-compressed when the browser takes it. It is
made once per worker process (vl-convert takes seconds: app.py's lifespan makes it in a thread when the worker
starts; a request that comes meanwhile waits for that one).
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from dataclasses import dataclass, field

PREFIX = "/ui/assets/"
CACHE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Script:
    text: str
    gzipped: bytes
    digest: str

    @property
    def url(self) -> str:
        return f"{PREFIX}vega-{self.digest}.js"


@dataclass
class ChartLibrary:
    _made: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self) -> Script:
        with self._lock:
            if not self._made:
                from attribution.reports.vega import script_bundle

                text = script_bundle()
                data = text.encode("utf-8")
                self._made.append(Script(text, gzip.compress(data, 6), hashlib.sha256(data).hexdigest()[:20]))
            return self._made[0]

    def warm(self) -> None:
        self.script()
