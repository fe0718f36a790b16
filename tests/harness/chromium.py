"""A real headless Chromium for the page tests, driven over the Chrome DevTools Protocol (websocket-client).

    browser = Chromium.launch()          # installs Debian's chromium first when missing and running as root
    page = browser.new_page()
    seconds = page.open(path)            # file:// URL; waits for <body data-ready="1"> (see attribution/pages)
    page.evaluate("document.title")
    page.screenshot(out_png)
    page.problems()                      # console errors, uncaught exceptions, log errors, network requests
    browser.close()

Fixture ``browser`` (module scope): one browser per test module. ``artifacts_dir()`` is the folder the
screenshots go to (tests/artifacts, git-ignored by the .gitignore inside it).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from . import apt

CHROMIUM = "/usr/bin/chromium"
PACKAGES = ["chromium"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--no-default-browser-check",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome-error:", "devtools:")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


class BrowserError(RuntimeError):
    pass


def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def ensure_chromium() -> str:
    """The Chromium binary; apt-get installs it when missing and we are root (apt-get update only if needed)."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} missing and cannot apt-get install it (not root or no apt-get)")
    r = apt.install(PACKAGES)
    if r.returncode != 0 or not os.access(CHROMIUM, os.X_OK):
        raise BrowserError(f"{r.command} failed (rc {r.returncode}):\n{r.output[-3000:]}")
    return CHROMIUM


class Page:
    """One tab, with its own DevTools websocket; collects what a person would call an error."""

    def __init__(self, ws) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._events: list[dict] = []
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.allowed: tuple[str, ...] = ()  # URL prefixes a page may request besides local schemes (a test server)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def _handle(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = [a.get("value", a.get("description", "")) for a in p.get("args", [])]
            self.console_errors.append("console." + p["type"] + ": " + " ".join(str(a) for a in args))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.console_errors.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.console_errors.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url') or ''}".strip())
        elif method == "Network.requestWillBeSent":
            url = p.get("request", {}).get("url", "")
            if not url.startswith(LOCAL_SCHEMES + self.allowed):
                self.requests.append(url)
        self._events.append(msg)

    def send(self, method: str, params: dict | None = None, timeout: float = 60.0) -> dict:
        mid = next(self._ids)
        self._ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        import websocket  # websocket-client

        deadline = time.monotonic() + timeout
        while True:
            self._ws.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                msg = json.loads(self._ws.recv())
            except websocket.WebSocketTimeoutException as exc:
                raise BrowserError(f"{method}: no answer in {timeout} s") from exc
            if msg.get("id") == mid:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._handle(msg)

    def evaluate(self, expression: str, timeout: float = 60.0):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      timeout=timeout)
        if "exceptionDetails" in r:
            raise BrowserError(f"evaluate failed: {r['exceptionDetails'].get('text')}: {expression[:200]}")
        return r.get("result", {}).get("value")

    def open(self, path: Path, width: int = 1400, height: int = 1000, ready_timeout: float = 60.0) -> float:
        """Load a page and wait until its charts are drawn. Returns the seconds from navigation to ready."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        deadline = t0 + ready_timeout
        while time.monotonic() < deadline:
            state = self.evaluate("document.readyState === 'complete' && document.body ? "
                                  "(document.body.getAttribute('data-ready') || '') : ''")
            if state == "1":
                return time.monotonic() - t0
            if state == "error":
                raise BrowserError(f"page reported a chart error: {self.console_errors}")
            time.sleep(0.05)
        raise BrowserError(f"{path} not ready after {ready_timeout} s; errors: {self.console_errors}")

    def goto(self, url: str, width: int = 1400, height: int = 1000, timeout: float = 60.0) -> None:
        """Load a URL (a page of a local test server) and wait until its document has loaded."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.evaluate("window.__leaving = true")
        self.send("Page.navigate", {"url": url})
        self._wait_for_new_document(timeout)

    def click(self, selector: str, timeout: float = 60.0) -> None:
        """Click the element (a link or a submit button) and wait until the page it leads to has loaded."""
        found = self.evaluate(f"(function () {{ var e = document.querySelector({json.dumps(selector)}); "
                              "if (!e) { return false; } window.__leaving = true; e.click(); return true; })()")
        if not found:
            raise BrowserError(f"no element matches {selector} on {self.evaluate('location.href')}")
        self._wait_for_new_document(timeout)

    def fill(self, selector: str, value: str) -> None:
        ok = self.evaluate(f"(function () {{ var e = document.querySelector({json.dumps(selector)}); "
                           f"if (!e) {{ return false; }} e.value = {json.dumps(value)}; return true; }})()")
        if not ok:
            raise BrowserError(f"no input matches {selector}")

    def wait_for(self, expression: str, timeout: float = 60.0):
        """Wait until a JavaScript expression is truthy (an event on the page, not a fixed delay); its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"{expression} still false after {timeout} s; errors: {self.console_errors}")

    def _wait_for_new_document(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate("window.__leaving === undefined && document.readyState === 'complete'"):
                return
            time.sleep(0.05)
        raise BrowserError(f"no new page loaded within {timeout} s; errors: {self.console_errors}")

    def screenshot(self, out: Path, width: int = 1400, max_height: int = 12000) -> Path:
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        height = max(200, min(height, max_height))
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        r = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                 "clip": {"x": 0, "y": 0, "width": width, "height": height,
                                                          "scale": 1}}, timeout=120)
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(r["data"]))
        return out

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries, and any request that left the machine."""
        self.send("Runtime.evaluate", {"expression": "1"})  # drain pending events
        return self.console_errors + [f"network request: {u}" for u in self.requests]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()


class Chromium:
    """A headless Chromium process we started, with its own throw-away profile."""

    def __init__(self, proc: subprocess.Popen, port: int, profile: Path) -> None:
        self.proc = proc
        self.port = port
        self.profile = profile
        self._pages: list[Page] = []

    @classmethod
    def launch(cls, timeout: float = 60.0) -> "Chromium":
        binary = ensure_chromium()
        profile = Path(tempfile.mkdtemp(prefix="attribution-chromium-"))
        log = open(profile / "chromium.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                text = (profile / "chromium.log").read_text(errors="replace")[-3000:]
                shutil.rmtree(profile, ignore_errors=True)
                raise BrowserError(f"chromium exited with {proc.returncode}:\n{text}")
            if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
                return cls(proc, int(port_file.read_text().splitlines()[0]), profile)
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
        raise BrowserError(f"chromium gave no DevTools port in {timeout} s")

    def new_page(self) -> Page:
        import websocket  # websocket-client

        from urllib.request import Request, urlopen

        req = Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urlopen(req, timeout=30) as r:
            target = json.loads(r.read())
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True,
                                         enable_multithread=False)
        page = Page(ws)
        self._pages.append(page)
        return page

    def close(self) -> None:
        for p in self._pages:
            p.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        for _ in range(3):  # a helper process of the browser may still write a file as it exits
            shutil.rmtree(self.profile, ignore_errors=True)
            if not self.profile.exists():
                break
            time.sleep(0.2)


@pytest.fixture(scope="module")
def browser():
    b = Chromium.launch()
    try:
        yield b
    finally:
        b.close()
