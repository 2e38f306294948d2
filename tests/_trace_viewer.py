"""Load a Chrome trace-event file in a real browser-based trace viewer and screenshot it.

chrome://tracing is gone from current Chromium builds and Perfetto UI cannot be fetched
offline, but Chromium bundles the DevTools front end, whose Performance panel reads Chrome
trace-event JSON: its stand-alone ``trace_app.html`` is served by the browser's own
remote-debugging HTTP server and takes the trace as ``?loadTimelineFromURL=`` (a ``data:`` URL:
the front end's content security policy allows no other origin). Clicks (CSS pixels) expand
tracks before the screenshot.
"""
from __future__ import annotations

import base64
import re
import urllib.parse

import browser

#: what the front end itself logs while it starts: its start-up timers, the debugging server's
#: missing favicon.ico and the software-WebGL notice of a headless browser
EXPECTED = ("timeEnd: ", "Failed to load resource", "Automatic fallback to software WebGL")


def open_trace(data: bytes, clicks: tuple[tuple[int, int], ...] = (), *, settle_s: float = 8.0) -> browser.PageRun:
    """Open the trace JSON ``data`` in DevTools' trace viewer of a fresh headless Chromium.

    Returns the :class:`browser.PageRun` with ``value`` = the page's text and ``problems``
    without the :data:`EXPECTED` start-up messages.
    """
    trace = urllib.parse.quote("data:application/json;base64," + base64.b64encode(data).decode(), safe="")

    def url(ws_url: str) -> str:
        port = re.search(r"ws://[^/]+:(\d+)/", ws_url).group(1)
        return f"http://127.0.0.1:{port}/devtools/trace_app.html?loadTimelineFromURL={trace}"

    run = browser.open_page("", "document.body.innerText", settle_s=settle_s, timeout_s=150.0, url=url, clicks=clicks)
    run.console = [m for m in run.console if not any(e in m for e in EXPECTED)]
    run.log = [m for m in run.log if not any(e in m for e in EXPECTED)]
    return run
