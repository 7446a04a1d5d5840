"""Helpers of the browser tests (tests/service/test_page_browser.py): the search page driven through
Selenium, and a service app served by uvicorn in a thread of the test process."""

import importlib.util
import json
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from serve_helpers import free_port

WAIT_S = 30


def _find(env: str, *names: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given if Path(given).is_file() else None
    return next((path for path in map(shutil.which, names) if path), None)


CHROMIUM = _find("LBHASH_CHROMIUM", "chromium", "chromium-browser")
CHROMEDRIVER = _find("LBHASH_CHROMEDRIVER", "chromedriver")
MISSING = ("selenium is not installed (pip install -e '.[test]')" if importlib.util.find_spec("selenium") is None
           else None if CHROMIUM and CHROMEDRIVER else
           "headless Chromium is not installed: apt-get install chromium chromium-driver (found chromium: "
           f"{CHROMIUM}, chromedriver: {CHROMEDRIVER}; or set LBHASH_CHROMIUM and LBHASH_CHROMEDRIVER)")


def headless_chromium():
    """The system's Chromium, headless, through its own driver (nothing downloads a browser),
    logging its requests and console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, were it asked, may download nothing
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1366,900",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--no-proxy-server"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # the given driver: no download


def requests_seen(driver) -> list[str]:
    """The URLs the browser asked for since the last call."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls

# For each word of an element's text: on how many lines it lies (1: not broken).
WORD_LINES = """
const node = arguments[0].firstChild, text = node.textContent, out = [];
for (const m of text.matchAll(/\\S+/g)) {
  const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
  out.push(new Set([...r.getClientRects()].map((c) => Math.round(c.top))).size);
}
return out;"""

# Drops a file made of the bytes at a URL of the page's server on an element, as a person
# dragging a file there would.
DROP = """
const [selector, url, name] = arguments;
return (async () => {
  const blob = await (await fetch(url)).blob();
  const files = new DataTransfer();
  files.items.add(new File([blob], name, { type: blob.type }));
  const target = document.querySelector(selector);
  for (const type of ["dragenter", "dragover", "drop"]) {
    target.dispatchEvent(new DragEvent(type, { dataTransfer: files, bubbles: true, cancelable: true }));
  }
})();"""


class PageDriver:
    """The search page in a Selenium driver: its elements, and its actions waited for (the page
    counts each finished action in #results[data-done])."""

    def __init__(self, driver):
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.wait = driver, WebDriverWait(driver, WAIT_S)

    def by_id(self, element_id):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id)

    def all(self, css):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, element_id) -> str:
        return self.by_id(element_id).text

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def done(self) -> int:
        return int(self.by_id("results").get_attribute("data-done") or 0)

    def open(self, url, actions: int = 1):
        """Load the page at `url` and wait for its first `actions` (the header; a linked search)."""
        self.driver.get(url)
        self.wait.until(lambda d: self.done() >= actions)

    def act(self, trigger, *args):
        before = self.done()
        trigger(*args)
        self.wait.until(lambda d: self.done() > before)

    def cards(self):
        return self.all("#grid li.card")

    def hit_ids(self) -> list[int]:
        return [int(c.get_attribute("data-id")) for c in self.all("#grid li.card.hit")]

    def thumbnails(self) -> list[int]:
        """The natural width of each result's thumbnail (-1: not loaded yet)."""
        return self.js("return [...document.querySelectorAll('#grid img.thumb')].map(i => i.complete ? i.naturalWidth : -1)")

    def first_thumbnail_pixels(self):
        """(width, height, RGBA values) of the first result's thumbnail, as the browser decoded it."""
        return self.js("""
            const img = document.querySelector('#grid li.card img.thumb');
            const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0);
            return [c.width, c.height, Array.from(g.getImageData(0, 0, c.width, c.height).data)];""")

    def error(self) -> str:
        return self.text("error") if self.by_id("error").is_displayed() else ""

    def width(self, px: int | None):
        """Lay the page out `px` wide (a desktop window is at least 500 px: emulated), or as the window again."""
        if px is None:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        else:
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                        {"width": px, "height": 740, "deviceScaleFactor": 1, "mobile": False})

    def sideways(self) -> int:
        """How far the page scrolls sideways (0: not at all)."""
        return self.js("const e = document.scrollingElement; return e.scrollWidth - e.clientWidth")

    def word_lines(self, element) -> list[int]:
        return self.js(WORD_LINES, element)

    def drop(self, selector, url, name):
        self.js(DROP, selector, url, name)


@contextmanager
def served_in_thread(app):
    """`app` served by uvicorn on 127.0.0.1 (a free port) in a thread; yields its URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="page-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT_S)
