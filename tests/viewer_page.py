"""The UMind browser viewer driven in headless Chromium: open a study, run a task, paint, read what is drawn.

Built on `browser.Browser` (CDP over a websocket). What the page shows is read back from screenshots, not from
the page's own state, where a test is about what the annotator sees: the overlay's pixels are compared with the
mask the server answered, sampled at each image pixel's centre through the page's own image-to-screen mapping.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import numpy as np

from browser import Browser

WIDTH, HEIGHT = 800, 600


class ViewerPage:
    def __init__(self, browser: Browser, base_url: str, out: Path):
        self.b, self.url, self.out = browser, base_url, out
        self.b.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                    mobile=False)
        self.actions = 0  # what an annotator would do: navigations, typed text, key presses, clicks, drags

    @classmethod
    def start(cls, base_url: str, profile: Path, out: Path) -> "ViewerPage":
        shutil.rmtree(profile, ignore_errors=True)
        return cls(Browser(profile, width=WIDTH, height=HEIGHT), base_url, out)

    def close(self) -> None:
        self.b.close()

    # ---------------------------------------------------------------- actions
    def open(self, query: str, wait_study: bool = True) -> None:
        self.actions += 1
        self.b.goto(f"{self.url}/viewer/?{query}")
        if wait_study:
            self.b.wait_for("window.umind && window.umind.ui.study && window.umind.view.loaded() && "
                            "document.getElementById('umind-message').textContent.includes('frame')", 90,
                            f"the viewer opening {query}")

    def key(self, key: str, code: str | None = None, text: str | None = None) -> None:
        self.actions += 1
        vk = {"Enter": 13, "ArrowDown": 40, "ArrowUp": 38}.get(key, ord(key.upper()) if len(key) == 1 else 0)
        common = {"key": key, "code": code or (f"Key{key.upper()}" if len(key) == 1 else key),
                  "windowsVirtualKeyCode": vk}
        self.b.send("Input.dispatchKeyEvent", type="keyDown", text=text if text is not None else
                    (key if len(key) == 1 else ("\r" if key == "Enter" else "")), **common)
        self.b.send("Input.dispatchKeyEvent", type="keyUp", **common)

    def type_prompt(self, text: str) -> None:
        self.actions += 1
        self.b.js("document.getElementById('umind-prompt').focus()")
        self.b.send("Input.insertText", text=text)

    def choose_task(self, task: str) -> None:
        self.actions += 1
        self.b.js(f"(() => {{ const t = document.getElementById('umind-task'); t.value = {json.dumps(task)};"
                  "t.dispatchEvent(new Event('change')); })()")

    def blur(self) -> None:
        self.b.js("document.activeElement && document.activeElement.blur()")

    def run(self, task: str | None = None, prompt: str | None = None, timeout: float = 120) -> dict:
        """Choose, type and press Enter; wait until the answer is drawn. The reply's params."""
        if task:
            self.choose_task(task)
        if prompt is not None:
            self.b.js("document.getElementById('umind-prompt').value = ''")
            self.type_prompt(prompt)
        self.b.js("window.umind.ui.lastTiming = null; document.getElementById('umind-message').textContent = ''")
        self.b.js("document.getElementById('umind-prompt').focus()")
        self.key("Enter", code="Enter")
        self.wait_done(timeout)
        return self.b.js("window.umind.ui.reply && window.umind.ui.reply.params")

    def wait_done(self, timeout: float = 120) -> str:
        return self.b.wait_for("!window.umind.ui.busy && document.getElementById('umind-message').textContent",
                               timeout, "the panel's answer or message")

    def go_to_frame(self, k: int) -> None:
        """Step down to frame k with the arrow key, as an annotator scrolls a clip from its first frame."""
        self.blur()
        for _ in range(k):
            self.key("ArrowDown", code="ArrowDown")
        self.b.wait_for(f"window.umind.view.currentFrame() === {k}", 10, f"frame {k}")

    def message(self) -> str:
        return self.b.js("document.getElementById('umind-message').textContent")

    def drag(self, points: list[tuple[float, float]]) -> None:
        """A left-button drag through image pixels `points` (mapped to the screen by the page)."""
        self.actions += 1
        screen = [self.image_to_screen(x, y) for x, y in points]
        self.b.send("Input.dispatchMouseEvent", type="mouseMoved", x=screen[0][0], y=screen[0][1])
        self.b.send("Input.dispatchMouseEvent", type="mousePressed", x=screen[0][0], y=screen[0][1],
                    button="left", buttons=1, clickCount=1)
        for sx, sy in screen[1:]:
            self.b.send("Input.dispatchMouseEvent", type="mouseMoved", x=sx, y=sy, button="left", buttons=1)
            self.b.pump(0.05)
        self.b.send("Input.dispatchMouseEvent", type="mouseReleased", x=screen[-1][0], y=screen[-1][1],
                    button="left", buttons=0, clickCount=1)
        self.b.pump(0.3)

    # ---------------------------------------------------------------- reading the screen
    def image_to_screen(self, x: float, y: float) -> tuple[float, float]:
        cx, cy = self.b.js(f"(() => {{ const r = document.getElementById('umind-viewport').getBoundingClientRect();"
                           f" const c = window.umind.imageToCanvas({x}, {y}); return [c[0] + r.left, c[1] + r.top]; }})()")
        return float(cx), float(cy)

    def screenshot(self, name: str) -> np.ndarray:
        from PIL import Image

        self.b.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        path = self.b.screenshot(self.out / f"{name}.png")
        return np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB")).astype(np.int16)

    def set_overlay(self, on: bool) -> None:
        self.b.js(f"(() => {{ const c = document.getElementById('umind-overlay'); if (c.checked !== {str(on).lower()})"
                  " { c.checked = !c.checked; c.dispatchEvent(new Event('change')); } })()")
        self.b.pump(0.3)

    def drawn_mask(self, width: int, height: int, name: str) -> np.ndarray:
        """The overlay as the screen shows it: image pixels whose centre changes colour when the mask is shown."""
        self.set_overlay(True)
        on = self.screenshot(f"{name}-overlay-on")
        self.set_overlay(False)
        off = self.screenshot(f"{name}-overlay-off")
        self.set_overlay(True)
        o = np.array(self.image_to_screen(0, 0))
        ex = np.array(self.image_to_screen(1, 0)) - o
        ey = np.array(self.image_to_screen(0, 1)) - o
        ys, xs = np.mgrid[0:height, 0:width]
        sx = np.rint(o[0] + xs * ex[0] + ys * ey[0]).astype(int)
        sy = np.rint(o[1] + xs * ex[1] + ys * ey[1]).astype(int)
        h, w = on.shape[:2]
        inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
        if not inside.all():
            raise AssertionError(f"{(~inside).sum()} image pixels are off screen")
        diff = np.abs(on[sy, sx] - off[sy, sx]).sum(-1)
        return diff > 24

    def wait_idle(self, seconds: float = 0.2) -> None:
        time.sleep(seconds)

