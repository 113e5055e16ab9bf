"""``make bench`` records of "Plan a deployment" (``book/planner.md``, ``_static/planner.js``).

- ``planner.mismatches``: of the browser test's 200 seeded random settings
  (``tests/browser/test_planner.py``), how many the built page shows a number for that the
  solutions' functions do not give (integers to the byte, times to 1e-12 relative), or
  refuses differently. Goal ``== 0``. Needs the built book and Chromium; without either
  the value is NaN and the note says why.
- ``planner.script_bytes``: the bytes of the page's script, which the reader downloads
  with every page. Goal ``< 102400`` (100 KiB).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import tempfile
import threading

from benchmarks.records import Record
from grading.layout import ROOT
from tests.browser.test_planner import QuietHandler

SCRIPT = ROOT / "_static" / "planner.js"
MAX_SCRIPT_BYTES = 100 * 1024


@contextlib.contextmanager
def _served(html):
    handler = functools.partial(QuietHandler, directory=str(html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@contextlib.contextmanager
def _chromium(binary: str, driver: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile = tempfile.mkdtemp(prefix="planner-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1280,1600"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _mismatches() -> Record:
    from tests.browser import test_planner as planner

    missing = ("Chromium and chromedriver" if not (planner.CHROMIUM and planner.CHROMEDRIVER)
               else "the built page (make book)" if not (planner.HTML / planner.PAGE).exists() else "")
    if missing:
        return Record("planner.mismatches", float("nan"), "settings", "== 0", note=f"not measured: needs {missing}")
    with _served(planner.HTML) as server, _chromium(planner.CHROMIUM, planner.CHROMEDRIVER) as browser:
        count, refused, bad = planner.compare_random_settings(browser, f"{server}/{planner.PAGE}")
    return Record("planner.mismatches", len(bad), "settings", "== 0",
                  note=f"of {count} seeded random settings ({refused} refused alike by page and reference)")


def run() -> list[Record]:
    size = len(SCRIPT.read_bytes())
    return [_mismatches(), Record("planner.script_bytes", size, "bytes", f"< {MAX_SCRIPT_BYTES}")]
