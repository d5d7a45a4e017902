"""Headless system Chromium driven over the DevTools protocol, for the OHIF test; nothing downloads a browser.

Speaks CDP over a websocket with `websocket-client` (already in the environment), so no chromedriver or
Playwright browser build is needed: the Debian `chromium` package is the browser. One page, one connection.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from server_utils import stop_process_group

INSTALL = "apt-get install -y chromium (Debian, as root; .ci/run does it)"


def chromium_binary() -> str | None:
    return next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)


class Browser:
    def __init__(self, profile: Path, width: int = 1400, height: int = 900, timeout: float = 60.0):
        import websocket

        exe = chromium_binary()
        if exe is None:
            raise RuntimeError(f"Chromium is not installed: {INSTALL}")
        profile.mkdir(parents=True, exist_ok=True)
        cmd = ["nice", "-n", "10", exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-dev-shm-usage", "--use-gl=swiftshader", "--enable-unsafe-swiftshader",
               f"--window-size={width},{height}", f"--user-data-dir={profile}", "--remote-debugging-port=0",
               "--remote-allow-origins=*", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(profile / "chromium.log", "w"),
                                     start_new_session=True)
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"Chromium did not start: {(profile / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.loads(r.read()) if t["type"] == "page")
        self._timeout = timeout
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout)
        self._ids = itertools.count(1)
        self.console: list[str] = []
        self.requests: dict[str, dict] = {}  # requestId -> url, method, postData, status (of the server's API)
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Network.enable")

    def send(self, method: str, **params) -> dict:
        """One CDP command's result; events that arrive meanwhile are kept (console messages) or dropped."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Network.requestWillBeSent":
            req = params["request"]
            self.requests[params["requestId"]] = {"url": req["url"], "method": req["method"],
                                                  "postData": req.get("postData", "")[:5000], "status": None}
        elif method == "Network.responseReceived" and params["requestId"] in self.requests:
            self.requests[params["requestId"]]["status"] = params["response"]["status"]
        elif method == "Runtime.consoleAPICalled":
            args = params.get("args", [])
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args)[:500])

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def js(self, expression: str, timeout: float = 60.0):
        """The value of a JavaScript expression (promises awaited)."""
        out = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True,
                        timeout=int(timeout * 1000))
        if "exceptionDetails" in out:
            raise RuntimeError(f"JS error: {out['exceptionDetails'].get('exception', {}).get('description')}")
        return out.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str, poll: float = 1.0):
        """Poll a JS expression until it is truthy; AssertionError naming `what` (and a screenshot) otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            self.pump(poll)
        raise AssertionError(f"OHIF: {what} not seen within {timeout:.0f} s; console: {self.console[-10:]}")

    def pump(self, seconds: float) -> None:
        """Wait, recording the events (requests, console) that arrive meanwhile."""
        import websocket

        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.ws.settimeout(left)
            try:
                self._event(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
        self.ws.settimeout(self._timeout)

    def screenshot(self, path: Path) -> Path:
        from umind_core.atomic import write_bytes

        data = self.send("Page.captureScreenshot", format="png")["data"]
        return write_bytes(path, base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        stop_process_group(self.proc, 10)
