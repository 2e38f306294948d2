"""Open an HTML file in headless Chromium over the DevTools protocol and report what happened.

Used by the report tests: every console message, uncaught exception, log entry and network
request of the page is collected, a JavaScript expression is evaluated in it, and a full-page
PNG screenshot is taken. The websocket client is tornado's (a dependency of ``distributed``),
so nothing beyond dtrace's own dependencies is needed; the browser is the Debian ``chromium``
package (``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
]
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageRun:
    """What happened while the page loaded."""

    console: list[str] = field(default_factory=list)  # every console.* call: "type: text"
    exceptions: list[str] = field(default_factory=list)  # uncaught exceptions
    log: list[str] = field(default_factory=list)  # browser log entries of level warning/error
    requests: list[str] = field(default_factory=list)  # every URL the page requested
    value: Any = None  # the evaluated expression
    size: tuple[int, int] = (0, 0)  # CSS content width, height
    png: bytes = b""  # full-page screenshot

    @property
    def problems(self) -> list[str]:
        return self.console + self.exceptions + self.log


class _Session:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict] = []

    async def _read(self, deadline: float) -> dict:
        raw = await asyncio.wait_for(self.ws.read_message(), max(deadline - time.monotonic(), 0.05))
        if raw is None:
            raise RuntimeError("the DevTools connection closed")
        return json.loads(raw)

    async def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60.0
    ) -> dict:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        await self.ws.write_message(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            m = await self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    async def wait_for(self, event: str, timeout: float = 60.0) -> dict:
        for m in self.events:
            if m.get("method") == event:
                return m
        deadline = time.monotonic() + timeout
        while True:
            m = await self._read(deadline)
            self.events.append(m)
            if m.get("method") == event:
                return m


def _describe(event: dict) -> tuple[str, str] | None:
    method, p = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
        return "console", f"{p.get('type')}: {text}"
    if method == "Runtime.exceptionThrown":
        d = p.get("exceptionDetails", {})
        return "exceptions", str(d.get("exception", {}).get("description") or d.get("text"))
    if method == "Log.entryAdded" and p.get("entry", {}).get("level") in ("warning", "error"):
        e = p["entry"]
        return "log", f"{e.get('level')}: {e.get('text')} ({e.get('url', '')})"
    if method == "Network.requestWillBeSent":
        return "requests", str(p.get("request", {}).get("url"))
    return None


async def _drive(
    ws_url: str,
    url: str,
    expression: str,
    settle_s: float,
    clicks: tuple[tuple[int, int], ...] = (),
    prepare: str | None = None,
    window: tuple[int, int] = (1280, 900),
) -> PageRun:
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(ws_url, max_message_size=1 << 30)
    s = _Session(ws)
    try:
        target = (await s.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
        sid = (await s.call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            await s.call(f"{domain}.enable", session=sid)
        s.events.clear()
        await s.call("Page.navigate", {"url": url}, session=sid)
        await s.wait_for("Page.loadEventFired")
        prepared = None
        if prepare is not None:  # e.g. hand the page its data through its own API
            prepared = await s.call(
                "Runtime.evaluate",
                {"expression": prepare, "awaitPromise": True, "returnByValue": True},
                session=sid,
                timeout=120,
            )
        await asyncio.sleep(settle_s)
        for x, y in clicks:  # left clicks at CSS pixels, each given time to take effect
            for kind in ("mousePressed", "mouseReleased"):
                await s.call(
                    "Input.dispatchMouseEvent",
                    {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                    session=sid,
                )
            await asyncio.sleep(0.8)
        run = PageRun()
        if prepared is not None and "exceptionDetails" in prepared:
            run.exceptions.append(f"preparing the page: {prepared['exceptionDetails']}")
        res = await s.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=sid)
        if "exceptionDetails" in res:
            run.exceptions.append(f"evaluating the check: {res['exceptionDetails']}")
        run.value = res.get("result", {}).get("value")
        metrics = await s.call("Page.getLayoutMetrics", session=sid)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        w, h = int(size["width"]), int(size["height"])
        run.size = (w, h)
        shot = await s.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": w, "height": min(h, 30000), "scale": 1},
            },
            session=sid,
            timeout=120,
        )
        run.png = base64.b64decode(shot["data"])
        for ev in s.events:
            d = _describe(ev)
            if d:
                getattr(run, d[0]).append(d[1])
        try:
            await s.call("Browser.close", timeout=5)
        except Exception:  # the browser may close the socket before answering
            pass
        return run
    finally:
        ws.close()
        try:  # wait until the connection is closed, so its socket is released inside the loop
            while await asyncio.wait_for(ws.read_message(), 5) is not None:
                pass
        except (asyncio.TimeoutError, Exception):
            pass


def open_page(
    path: str,
    expression: str = "null",
    *,
    settle_s: float = 0.2,
    timeout_s: float = 90.0,
    url: Callable[[str], str] | None = None,
    clicks: tuple[tuple[int, int], ...] = (),
    prepare: str | None = None,
    window: tuple[int, int] = (1280, 900),
) -> PageRun:
    """Load ``path`` in a fresh headless Chromium and return a :class:`PageRun`.

    ``url`` (given the browser's DevTools websocket address) replaces ``file://path``, e.g. for
    a page of the browser's own debugging server; ``prepare`` (an expression, awaited) runs once the
    page has loaded; ``clicks`` are made before the evaluation; ``window``: the window's size in px.
    """
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("chromium not found")
    profile = tempfile.mkdtemp(prefix="dtrace-chromium-")
    err_path = os.path.join(profile, "stderr.txt")
    with open(err_path, "w") as err:
        # own session: the browser's helper processes can be ended together with it
        proc = subprocess.Popen(
            [
                exe,
                *(f for f in FLAGS if not f.startswith("--window-size=")),
                f"--window-size={window[0]},{window[1]}",
                f"--user-data-dir={os.path.join(profile, 'p')}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        ws_url = None
        t0 = time.monotonic()
        while ws_url is None and time.monotonic() - t0 < timeout_s and proc.poll() is None:
            with open(err_path, errors="replace") as f:
                m = re.search(r"DevTools listening on (ws://\S+)", f.read())
            if m:
                ws_url = m.group(1)
            else:
                time.sleep(0.05)
        if ws_url is None:
            with open(err_path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"chromium did not start (exit {proc.poll()}): {tail}")
        return asyncio.run(
            asyncio.wait_for(
                _drive(
                    ws_url,
                    url(ws_url) if url else "file://" + os.path.abspath(path),
                    expression,
                    settle_s,
                    clicks,
                    prepare,
                ),
                timeout_s,
            )
        )
    finally:
        try:
            proc.wait(timeout=10)  # Browser.close lets it exit by itself
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)
