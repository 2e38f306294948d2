"""Load a Chrome trace-event file in a real browser-based trace viewer and screenshot it.

chrome://tracing is gone from current Chromium builds and Perfetto UI cannot be fetched
offline, but Chromium bundles the DevTools front end, whose Performance panel reads Chrome
trace-event JSON: its stand-alone ``trace_app.html`` is served by the browser's own
remote-debugging HTTP server. Since Chromium 156 that page no longer loads ``?loadTimelineFromURL=``
(it tries to rehydrate a debugging session and reports "Error loading log"), so the trace is
handed to the Performance panel's own file loader from inside the page. Clicks (CSS pixels)
expand tracks before the screenshot.
"""

from __future__ import annotations

import base64
import re

import browser

#: what the front end itself logs while it starts: its start-up timers, the debugging server's
#: missing favicon.ico and the software-WebGL notice of a headless browser
EXPECTED = ("timeEnd: ", "Failed to load resource", "Automatic fallback to software WebGL")


#: show the Performance panel, hand it the trace as a file, close the "no connection" notice
#: (there is no page to debug)
LOAD = """(async () => {
  await new Promise(done => setTimeout(done, 1500));
  const UI = await import('./ui/legacy/legacy.js');
  await UI.ViewManager.ViewManager.instance().showView('timeline');
  const Timeline = await import('./panels/timeline/timeline.js');
  const bytes = Uint8Array.from(atob('%s'), c => c.charCodeAt(0));
  await Timeline.TimelinePanel.TimelinePanel.instance().loadFromFile(new File([bytes], 'trace.json'));
})()"""


def open_trace(data: bytes, clicks: tuple[tuple[int, int], ...] = (), *, settle_s: float = 8.0) -> browser.PageRun:
    """Open the trace JSON ``data`` in DevTools' trace viewer of a fresh headless Chromium.

    The page is the stand-alone ``trace_app.html``; the trace is handed to its Performance panel
    through the panel's own file loader (what *Load profile…* does). Returns the
    :class:`browser.PageRun` with ``value`` = the page's text and ``problems`` without the
    :data:`EXPECTED` start-up messages.
    """

    def url(ws_url: str) -> str:
        port = re.search(r"ws://[^/]+:(\d+)/", ws_url).group(1)
        return f"http://127.0.0.1:{port}/devtools/trace_app.html"

    run = browser.open_page(
        "",
        "document.body.innerText",
        settle_s=settle_s,
        timeout_s=150.0,
        url=url,
        clicks=clicks,
        prepare=LOAD % base64.b64encode(data).decode(),
    )
    run.console = [m for m in run.console if not any(e in m for e in EXPECTED)]
    run.log = [m for m in run.log if not any(e in m for e in EXPECTED)]
    return run
