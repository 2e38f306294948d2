"""Load a Chrome trace-event file in a real browser-based trace viewer and screenshot it.

chrome://tracing is gone from current Chromium builds and Perfetto UI cannot be fetched
offline, but Chromium bundles the DevTools front end, whose Performance panel reads Chrome
trace-event JSON: its stand-alone ``trace_app.html`` is served by the browser's own
remote-debugging HTTP server and takes the trace as ``?loadTimelineFromURL=`` (a ``data:`` URL:
the front end's content security policy allows no other origin). Clicks (CSS pixels) expand
tracks before the screenshot. Uses :mod:`browser`'s launcher pieces (headless Chromium,
tornado websocket).
"""
from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field

import browser

EXPECTED = ("timeEnd: ",                   # the front end's own start-up timers
            "Failed to load resource",     # favicon.ico of the debugging server
            "Automatic fallback to software WebGL")


@dataclass
class ViewerRun:
    png: bytes = b""
    text: str = ""
    problems: list[str] = field(default_factory=list)   # console errors/exceptions not in EXPECTED


async def _drive(ws_url: str, url: str, clicks: list[tuple[int, int]], settle_s: float) -> ViewerRun:
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(ws_url, max_message_size=1 << 30)
    s = browser._Session(ws)
    try:
        target = (await s.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
        sid = (await s.call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            await s.call(f"{domain}.enable", session=sid)
        s.events.clear()
        await s.call("Page.navigate", {"url": url}, session=sid)
        await s.wait_for("Page.loadEventFired")
        await asyncio.sleep(settle_s)
        for x, y in clicks:
            for kind in ("mousePressed", "mouseReleased"):
                await s.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                          "clickCount": 1}, session=sid)
            await asyncio.sleep(0.8)
        run = ViewerRun()
        res = await s.call("Runtime.evaluate", {"expression": "document.body.innerText", "returnByValue": True},
                           session=sid)
        run.text = str(res.get("result", {}).get("value", ""))
        shot = await s.call("Page.captureScreenshot", {"format": "png"}, session=sid, timeout=120)
        run.png = base64.b64decode(shot["data"])
        for ev in s.events:
            d = browser._describe(ev)
            if d and d[0] != "requests" and not any(e in d[1] for e in EXPECTED):
                run.problems.append(d[1])
        try:
            await s.call("Browser.close", timeout=5)
        except Exception:  # the browser may close the socket before answering
            pass
        return run
    finally:
        ws.close()


def open_trace(data: bytes, clicks: list[tuple[int, int]] = (), *, settle_s: float = 8.0,
               timeout_s: float = 150.0) -> ViewerRun:
    """Open the trace JSON ``data`` in DevTools' trace viewer of a fresh headless Chromium."""
    exe = browser.find_chromium()
    if exe is None:
        raise FileNotFoundError("chromium not found")
    profile = tempfile.mkdtemp(prefix="dtrace-chromium-")
    err_path = os.path.join(profile, "stderr.txt")
    with open(err_path, "w") as err:
        proc = subprocess.Popen([exe, *browser.FLAGS, f"--user-data-dir={os.path.join(profile, 'p')}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        ws_url = None
        t0 = time.monotonic()
        while ws_url is None and time.monotonic() - t0 < 60 and proc.poll() is None:
            with open(err_path, errors="replace") as f:
                m = re.search(r"DevTools listening on (ws://\S+)", f.read())
            ws_url = m.group(1) if m else None
            if ws_url is None:
                time.sleep(0.05)
        if ws_url is None:
            raise RuntimeError("chromium did not start")
        port = re.search(r"ws://[^/]+:(\d+)/", ws_url).group(1)
        trace = urllib.parse.quote("data:application/json;base64," + base64.b64encode(data).decode(), safe="")
        url = f"http://127.0.0.1:{port}/devtools/trace_app.html?loadTimelineFromURL={trace}"
        return asyncio.run(asyncio.wait_for(_drive(ws_url, url, list(clicks), settle_s), timeout_s))
    finally:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)
