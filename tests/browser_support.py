"""A headless Chromium driven over the DevTools protocol, for the `browser` tests.

Only what the tests need: open a file at a viewport size, collect console errors (console.error,
uncaught exceptions, and the browser's own log: a blocked fetch, a CSP violation), evaluate an
expression, take a PNG screenshot. The DevTools port is bound to 127.0.0.1 and chosen by
Chromium; the browser runs in its own process group and is ended by its pid.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
START_TIMEOUT_S = 60


def find_chromium() -> str | None:
    explicit = os.environ.get("VCRASH_CHROMIUM")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    return next((path for path in map(shutil.which, NAMES) if path), None)


class Chromium:
    def __init__(self, executable: str):
        import websocket  # websocket-client: the `browser` extra

        self._profile = tempfile.mkdtemp(prefix="vcrash-chromium-")
        args = [executable, "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--hide-scrollbars", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to start its sandbox as root (CI containers)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not open its DevTools port (exit {self.proc.returncode})")
            time.sleep(0.1)
        port, path = port_file.read_text().splitlines()[:2]
        self._ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=60, suppress_origin=True)
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        while True:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 30.0) -> dict:
        for i, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(i)
        self._ws.settimeout(timeout)
        while True:
            event = json.loads(self._ws.recv())
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop()

    def open(self, url: str, width: int, height: int, javascript: bool = True) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}, session)
        if not javascript:
            self.send("Emulation.setScriptExecutionDisabled", {"value": True}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session)

    def close(self) -> None:
        try:
            if getattr(self, "_ws", None) is not None:
                try:
                    self.send("Browser.close")
                except Exception:
                    pass
                self._ws.close()
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)  # our own process group, by its pid
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
            shutil.rmtree(self._profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str):
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                   self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        path.write_bytes(base64.b64decode(data))

    def console_errors(self) -> list[str]:
        self.evaluate("0")  # a round trip: events sent before it have arrived
        errors = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif event.get("method") == "Runtime.exceptionThrown":
                errors.append(params.get("exceptionDetails", {}).get("text", "exception"))
            elif event.get("method") == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors
