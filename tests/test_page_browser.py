"""The search page in a real browser: headless Chromium (Debian's chromium and chromedriver,
driven by Selenium given the driver's path, so nothing downloads a browser) against
`lbhash serve` on 127.0.0.1 over a small image index built from a run trained here.

Skips, saying why, when Selenium, Chromium or its driver is missing (`.ci/run` installs
them; `make test-browser` runs this file alone). Screenshots go to $LBHASH_TEST_ARTIFACTS
(default: test-artifacts/browser in the repository).
"""

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from helpers import cli
from lbhash.index import CodeIndex
from lbhash.index.origins import read_sources
from page_helpers import noisy
from test_service_process import Server, free_port

ARTIFACTS = Path(os.environ.get("LBHASH_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "test-artifacts"
                                / "browser"))
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
# checked before any fixture runs, so that a machine without a browser does not train the run
pytestmark = [pytest.mark.browser, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


@pytest.fixture(scope="module")
def browser():
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
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # the given driver: no download
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_image_run):
    root = tmp_path_factory.mktemp("browser")
    tree, run = tiny_image_run
    assert cli("index", "build", run, "--out", root / "ix").exit_code == 0
    server = Server(root / "ix", free_port(), "--run", run).start()
    yield server, tree, root
    server.kill()


def requests_seen(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_page_in_a_real_browser(browser, served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    server, tree, root = served
    started = time.monotonic()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(browser, WAIT_S)
    find, find_all = browser.find_element, browser.find_elements
    seen = []

    def text_of(element_id):
        return find(By.ID, element_id).text

    def cards():
        return find_all(By.CSS_SELECTOR, "#grid li.card")

    def done():  # actions the page finished (it counts them)
        return int(find(By.ID, "results").get_attribute("data-done") or 0)

    def act(trigger, *args):
        before = done()
        trigger(*args)
        wait.until(lambda d: done() > before)

    def thumbnails_decoded():
        return browser.execute_script(
            "return [...document.querySelectorAll('#grid img.thumb')].map(i => i.complete ? i.naturalWidth : -1)")

    def pixels_of_first_thumbnail():
        return browser.execute_script("""
            const img = document.querySelector('#grid li.card img.thumb');
            const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0);
            return [c.width, c.height, Array.from(g.getImageData(0, 0, c.width, c.height).data)];""")

    browser.get(f"{server.url}/")
    wait.until(lambda d: text_of("ntotal") == "44" and done() == 1)  # 48 images less one of each class held out
    page_text = browser.execute_script("return document.body.textContent")
    chance = json.loads((Path(server.extra[-1]) / "metrics.json").read_text())["chance_map"]
    assert f"; a random ranking: {chance:.3f})" in page_text, page_text[page_text.find("mAP"):][:200]
    assert "(0: two class centers coincide, above 4: classes fully apart)" in page_text  # the bound's scale
    record = read_sources(CodeIndex.load(root / "ix"))  # read only: the server owns it
    # the run puts a class's items at one code, and ties go by id: query with the red item of lowest id
    own_id = min(i for i in range(100) if (record.source(i) or "").startswith(f"{tree}/train/red/"))
    query = Path(record.source(own_id))

    # 1. upload a query image (an indexed one), k = 5 by the keyboard (Enter submits the form)
    find(By.ID, "query-file").send_keys(str(query))
    k = find(By.ID, "how-value")
    k.clear()
    act(k.send_keys, "5", Keys.ENTER)
    assert not find(By.ID, "error").is_displayed(), text_of("error")
    wait.until(lambda d: len(cards()) == 5 and all(w > 0 for w in thumbnails_decoded()))
    browser.save_screenshot(str(ARTIFACTS / "1-image-search.png"))
    assert thumbnails_decoded() == [32] * 5  # real decoded 32x32 images
    first = cards()[0]
    assert first.get_attribute("data-id") == str(own_id)
    assert first.find_element(By.CSS_SELECTOR, ".distance").get_attribute("data-distance") == "0"
    source = first.find_element(By.CSS_SELECTOR, ".source")
    assert source.get_attribute("data-source") == str(query) and source.text == "train/red/" + query.name
    width, height, rgba = pixels_of_first_thumbnail()
    from PIL import Image

    expected = np.array(Image.open(query).convert("RGB"))
    np.testing.assert_array_equal(np.array(rgba, np.uint8).reshape(height, width, 4)[..., :3], expected)
    assert len(find(By.ID, "query-bits").text.replace(" ", "")) == 16
    assert "The search took" in text_of("timing") and find(By.ID, "histogram").is_displayed()
    assert browser.execute_script("return document.getElementById('query-preview').naturalWidth") == 32
    for card in cards():  # the labels shown are the index's
        item_id = card.get_attribute("data-id")
        truth = httpx.get(f"{server.url}/items/{item_id}").json()["labels"]
        assert card.get_attribute("data-labels") == ",".join(map(str, truth))
        assert card.find_element(By.CSS_SELECTOR, ".labels").text.startswith(f"labels: {truth[0]} ")
    seen += requests_seen(browser)

    # 2. a label filter leaves only that label
    find(By.ID, "label-filter").send_keys("1")
    act(find(By.ID, "search-button").click)
    assert not find(By.ID, "error").is_displayed(), text_of("error")
    wait.until(lambda d: all(c.get_attribute("data-labels") == "1" for c in cards()) and len(cards()) == 5)
    assert "1 green" in cards()[0].find_element(By.CSS_SELECTOR, ".labels").text
    browser.save_screenshot(str(ARTIFACTS / "2-label-filter.png"))
    find(By.ID, "label-filter").clear()

    # 3. "more like this" from a card (the green item of lowest id: first among its ties), by the keyboard
    target = cards()[0].get_attribute("data-id")
    act(cards()[0].find_element(By.CSS_SELECTOR, "button.more").send_keys, Keys.ENTER)
    assert cards()[0].get_attribute("data-id") == target and f"item {target}" in text_of("status")
    assert cards()[0].find_element(By.CSS_SELECTOR, ".distance").get_attribute("data-distance") == "0"

    # 4. add an image, then delete it from its card; the page and the service agree
    new_image = tmp_path / "new-yellow.png"
    Image.fromarray(noisy(np.random.default_rng(5), (220, 200, 40))).save(new_image)
    find(By.ID, "add-files").send_keys(str(new_image))
    find(By.ID, "add-labels").send_keys("3")
    act(find(By.ID, "add-button").click)
    assert text_of("ntotal") == "45" and text_of("status").startswith("Added"), text_of("error")
    wait.until(lambda d: len(cards()) == 1 and all(w > 0 for w in thumbnails_decoded()))
    added = cards()[0]
    new_id = added.get_attribute("data-id")
    assert new_id == "48" and added.get_attribute("data-labels") == "3"
    assert added.find_element(By.CSS_SELECTOR, ".source").text == "uploaded: new-yellow.png"
    browser.save_screenshot(str(ARTIFACTS / "3-added.png"))
    added.find_element(By.CSS_SELECTOR, "button.delete").click()
    wait.until(EC.alert_is_present())
    browser.switch_to.alert.accept()
    wait.until(lambda d: text_of("ntotal") == "44" and not cards())
    assert httpx.get(f"{server.url}/items/{new_id}").status_code == 404

    # 5. a failed request says what went wrong, in the service's one line
    find(By.ID, "mode-code").click()
    find(By.ID, "query-code").send_keys("zz00")
    act(find(By.ID, "search-button").click)
    assert find(By.ID, "error").is_displayed()
    assert "POST /search failed (400): codes[0] is not a hex string" in text_of("error")
    browser.save_screenshot(str(ARTIFACTS / "4-error.png"))
    seen += requests_seen(browser)

    # 6. the API docs render their operations offline
    browser.get(f"{server.url}/docs")
    wait.until(lambda d: len(find_all(By.CSS_SELECTOR, ".opblock-summary-path")) >= 10)
    paths = {e.text.replace("\u200b", "") for e in find_all(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/search", "/items/{item_id}/image", "/about"} <= paths, paths
    browser.save_screenshot(str(ARTIFACTS / "5-docs.png"))
    browser.get(f"{server.url}/redoc")
    wait.until(lambda d: "/search/image" in d.find_element(By.TAG_NAME, "body").text)
    browser.save_screenshot(str(ARTIFACTS / "6-redoc.png"))
    time.sleep(0.5)  # let late requests (fonts, logos) show in the log
    seen += requests_seen(browser)

    outside = [u for u in seen if not u.startswith((server.url + "/", "data:", "blob:" + server.url))]
    assert seen and not outside, outside
    problems = [e["message"] for e in browser.get_log("browser")  # the 400 of step 5 is expected there
                if "Content Security Policy" in e["message"] or "Uncaught" in e["message"]]
    assert not problems, problems
    print(f"browser test: {time.monotonic() - started:.1f} s in the browser; screenshots in {ARTIFACTS}")


ATTACK = """<!doctype html><html><body><p id="done">no</p>
<form id="plain" method="POST" enctype="text/plain" action="{service}/items" target="sink">
<input name='{{"codes": ["{code}"], "ids": [777], "x": "' value='"}}'></form>
<iframe name="sink"></iframe>
<script>
(async () => {{
  const png = Uint8Array.from(atob("{png}"), (c) => c.charCodeAt(0));
  const form = new FormData();
  form.append("files", new Blob([png], {{ type: "image/png" }}), "a.png");
  form.append("ids", "778");
  const tries = [
    fetch("{service}/items/image", {{ method: "POST", body: form, mode: "no-cors" }}),
    fetch("{service}/items/{victim}", {{ method: "DELETE", mode: "cors" }}),
    fetch("{service}/items", {{ method: "POST", mode: "no-cors", body: '{{"codes": ["{code}"], "ids": [779]}}' }}),
  ];
  await Promise.allSettled(tries);
  document.getElementById("plain").submit();
  setTimeout(() => {{ document.getElementById("done").textContent = "yes"; }}, 1500);
}})();
</script></body></html>"""


def test_a_page_from_another_site_cannot_change_the_index(browser, served, tmp_path):
    """A page on another origin (localhost, another port) tries a multipart upload, a DELETE,
    a JSON body and a plain form POST against the service on 127.0.0.1: nothing changes."""
    import base64
    import http.server
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, tree, _ = served
    before = httpx.get(f"{server.url}/stats", timeout=10).json()["ntotal"]
    victim = int(CodeIndex.load(server.index_dir).ids()[0])
    png = base64.b64encode(next(Path(tree).rglob("*.png")).read_bytes()).decode()
    page = ATTACK.format(service=server.url, code="00" * 2, png=png, victim=victim)
    (tmp_path / "attack.html").write_text(page)
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **kw)  # noqa: E731
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        browser.get(f"http://localhost:{other.server_address[1]}/attack.html")
        WebDriverWait(browser, WAIT_S).until(lambda d: d.find_element(By.ID, "done").text == "yes")
    finally:
        other.shutdown()
        other.server_close()
        thread.join(timeout=10)
    assert httpx.get(f"{server.url}/stats", timeout=10).json()["ntotal"] == before
    assert httpx.get(f"{server.url}/items/{victim}", timeout=10).status_code == 200
    for taken in (777, 778, 779):
        assert httpx.get(f"{server.url}/items/{taken}", timeout=10).status_code == 404


def test_the_page_asks_once_for_the_key_of_a_locked_service(browser, served, tmp_path, monkeypatch):
    """With a read key, the page asks for the key, then searches and shows thumbnails with it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    _, tree, root = served
    monkeypatch.setenv("LBHASH_READ_KEY", "read-key-of-the-page-test")
    monkeypatch.setenv("LBHASH_WRITE_KEY", "write-key-of-the-page-test")
    shutil.copytree(root / "ix", tmp_path / "ix")
    locked = Server(tmp_path / "ix", free_port(), "--run", served[0].extra[-1]).start()
    try:
        wait = WebDriverWait(browser, WAIT_S)
        browser.get(f"{locked.url}/")
        wait.until(EC.alert_is_present())
        assert "needs its read key" in browser.switch_to.alert.text
        browser.switch_to.alert.send_keys("read-key-of-the-page-test")
        browser.switch_to.alert.accept()
        wait.until(lambda d: d.find_element(By.ID, "ntotal").text == "44")
        query = next(Path(tree).rglob("*.png"))
        browser.find_element(By.ID, "query-file").send_keys(str(query))
        k = browser.find_element(By.ID, "how-value")
        k.clear()
        k.send_keys("3", Keys.ENTER)
        decoded = ("return [...document.querySelectorAll('#grid img.thumb')]"
                   ".map(i => i.complete && i.src.startsWith('blob:') ? i.naturalWidth : -1)")
        wait.until(lambda d: d.execute_script(decoded) == [32] * 3)  # fetched with the key
        assert not EC.alert_is_present()(browser)  # asked once per tab
    finally:
        locked.kill()
    assert "read-key-of-the-page-test" not in locked.log
