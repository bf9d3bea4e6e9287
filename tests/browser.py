"""A real headless Chromium for the report tests, driven over the DevTools protocol on a pipe, and PNG helpers
to look at what it painted."""

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest


def chromium_executable() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
                None)


needs_chromium = pytest.mark.skipif(chromium_executable() is None,
                                    reason="no chromium on PATH (Debian: apt-get install chromium; make test does)")


class DevTools:
    """Chromium headless, driven over the DevTools protocol on a pipe; collects console errors per page."""

    def __init__(self, executable: str, profile_dir: Path) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_pipes() -> None:  # the protocol wants fd 3 for commands and fd 4 for replies
            commands = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            replies = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             f"--user-data-dir={profile_dir}", "--window-size=1280,900", "about:blank"],
            preexec_fn=wire_pipes, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise RuntimeError("chromium did not answer over the DevTools pipe in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the DevTools pipe (exit {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            self.events.append(self._receive(deadline))

    def open(self, path: Path) -> "Page":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        self.wait_for("Page.loadEventFired", session)
        # let anything queued after load (timers, late resource failures) report before we read the errors
        self.call("Runtime.evaluate", {"expression": "new Promise(r => setTimeout(r, 200))", "awaitPromise": True},
                  session=session)
        return Page(self, session)


class Page:
    def __init__(self, browser: DevTools, session: str) -> None:
        self.browser, self.session = browser, session

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and browser log errors (CSP, failed loads) on this page."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("exception", {}).get("description")
                             or params["exceptionDetails"]["text"])
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def evaluate(self, expression: str) -> object:
        reply = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                  session=self.session)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r} raised {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, box: dict) -> bytes:
        clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": box["height"], "scale": 1}
        reply = self.browser.call("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                              "captureBeyondViewport": True}, session=self.session)
        return base64.b64decode(reply["data"])


def png_pixels(data: bytes) -> list[tuple[int, ...]]:
    """RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, {}
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunks.setdefault(kind, []).append(data[position + 8:position + 8 + length])
        position += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(chunks[b"IDAT"]))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, up_left = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - up_left
                # Paeth: the neighbour closest to the guess, ties to left, then up
                nearest = min((abs(guess - left), 0, left), (abs(guess - up), 1, up),
                              (abs(guess - up_left), 2, up_left))
                line[i] = (line[i] + nearest[2]) & 0xFF
        rows.append(bytes(line))
        previous = line
    return [tuple(row[x:x + channels]) for row in rows for x in range(0, stride, channels)]


def pixels_near(pixels: list[tuple[int, ...]], colour: str, tolerance: int = 6) -> int:
    """Pixels within `tolerance` per channel of #rrggbb: proof that a mark of that colour was painted."""
    target = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return sum(all(abs(c - t) <= tolerance for c, t in zip(p[:3], target, strict=True)) for p in pixels)


def drawn_fraction(pixels: list[tuple[int, ...]]) -> float:
    """Share of pixels that differ from the most common (background) colour."""
    counts = Counter(pixels)
    background = counts.most_common(1)[0][1]
    return 1 - background / counts.total()
