"""Headless Chromium driven over the DevTools protocol, for testing the HTML report as a person sees it.

``open_page(path)`` loads a local file and returns what a reviewer's browser
would have done: console messages, uncaught exceptions, log entries (CSP
violations land here), network requests other than the page itself, any
JavaScript dialog (alert), the page's visible text, and a full-page PNG.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--remote-debugging-port=0",
]


def chromium_path() -> str:
    """The chromium binary, or skip the test with the reason."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("headless Chromium not installed (apt-get install chromium; .ci/run installs it)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        pytest.skip("websocket-client not installed (pip install -e '.[test]')")
    return exe


@dataclass
class PageResult:
    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log_entries: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    text: str = ""
    visible_codes: list[str] = field(default_factory=list)
    title: str = ""
    png: bytes = b""
    scroll_width: int = 0

    @property
    def errors(self) -> list[str]:
        """Everything a reviewer would see as an error in the DevTools console."""
        out = [f"console.{c['type']}: {c.get('args')}" for c in self.console if c["type"] in ("error", "assert")]
        out += [f"exception: {e}" for e in self.exceptions]
        out += [f"log {e.get('source')}: {e.get('text')}" for e in self.log_entries if e.get("level") == "error"]
        return out


class Chromium:
    """One headless browser process with one DevTools websocket (flattened target sessions)."""

    def __init__(self) -> None:
        import websocket

        exe = chromium_path()
        self.profile = tempfile.mkdtemp(prefix="pd-chromium-")
        # stderr goes to a file: chromium logs a lot there, and an unread pipe would stall it
        self.log_path = Path(self.profile) / "stderr.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"], stdout=subprocess.DEVNULL, stderr=self._log
        )
        url = self._ws_url()
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _ws_url(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r"DevTools listening on (ws://\S+)", self.log_path.read_text(errors="replace"))
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.close()
        raise RuntimeError("chromium did not start (no DevTools URL on stderr)")

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        self.ws.settimeout(60)
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _event(self, ev: dict[str, Any]) -> None:
        """Keep an event; accept a JavaScript dialog at once (it would block the page's load)."""
        self.events.append(ev)
        if ev.get("method") == "Page.javascriptDialogOpening":
            self.call("Page.handleJavaScriptDialog", {"accept": True}, session=ev.get("sessionId"))

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(deadline - time.monotonic(), 0.01))
            ev = json.loads(self.ws.recv())
            self._event(ev)
            if ev.get("method") == method:
                return ev
        raise TimeoutError(method)

    def drain(self, seconds: float) -> None:
        """Collect late events (e.g. a request fired after load)."""
        import websocket

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.ws.settimeout(0.1)
            try:
                self._event(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                continue

    def open_page(self, path: Path, bypass_csp: bool = False, width: int = 1200) -> PageResult:
        """Load ``path`` in a fresh tab and report what happened (see the module docstring)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.events.clear()
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=sid)
        if bypass_csp:
            self.call("Page.setBypassCSP", {"enabled": True}, session=sid)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        url = path.resolve().as_uri()
        self.call("Page.navigate", {"url": url}, session=sid)
        self.wait_for("Page.loadEventFired")
        self.drain(0.5)
        res = PageResult()
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled":
                res.console.append({"type": p.get("type"), "args": [a.get("value") for a in p.get("args", [])]})
            elif m == "Runtime.exceptionThrown":
                res.exceptions.append(p.get("exceptionDetails", {}))
            elif m == "Log.entryAdded":
                res.log_entries.append(p.get("entry", {}))
            elif m == "Network.requestWillBeSent":
                req = p.get("request", {}).get("url", "")
                if req != url:
                    res.requests.append(req)
            elif m == "Page.javascriptDialogOpening":
                res.dialogs.append(p.get("message", ""))

        def js(expr: str) -> Any:
            return self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)[
                "result"
            ].get("value")

        res.text = js("document.body.innerText")
        res.title = js("document.title")
        res.scroll_width = int(js("document.documentElement.scrollWidth") or 0)
        res.visible_codes = js(
            "Array.from(document.querySelectorAll('.code')).filter(e => "
            "e.getClientRects().length > 0 && getComputedStyle(e).visibility === 'visible')"
            ".map(e => e.textContent)"
        )
        height = int(js("Math.ceil(document.documentElement.scrollHeight)") or 900)
        clip = {"x": 0, "y": 0, "width": width, "height": min(height, 16000), "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, session=sid
        )
        res.png = base64.b64decode(shot["data"])
        self.call("Target.closeTarget", {"targetId": target})
        return res

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            self._log.close()
            shutil.rmtree(self.profile, ignore_errors=True)


ARTIFACTS = Path(__file__).resolve().parent / "_artifacts"


def save_screenshot(name: str, png: bytes) -> Path:
    """Write ``tests/_artifacts/<name>.png`` (gitignored) for a person to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    p = ARTIFACTS / f"{name}.png"
    p.write_bytes(png)
    return p


@pytest.fixture(scope="session")
def browser():
    b = Chromium()
    yield b
    b.close()
