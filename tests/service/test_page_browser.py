"""The search page in a real browser: headless Chromium (Debian's chromium and chromedriver,
driven by Selenium given the driver's path, so nothing downloads a browser) against
`lbhash serve` on 127.0.0.1 over a small image index built from a run trained here, and against
a feature index served in the test process (tests/browser_helpers.py).

Skips, saying why, when Selenium, Chromium or its driver is missing (`.ci/run` installs
them; `make test-browser` runs this file alone). Screenshots go to $LBHASH_TEST_ARTIFACTS
(default: test-artifacts/browser in the repository).
"""

import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from helpers import cli
from lbhash.index import CodeIndex, blended_search
from lbhash.instance import LOOKS_LIKE
from lbhash.indexes.instance_codes import index_transform
from lbhash.serving.searcher import ranked_queries
from lbhash.indexes.origins import read_sources
from browser_helpers import MISSING, WAIT_S, PageDriver, headless_chromium, requests_seen, served_in_thread
from page_helpers import noisy
from serve_helpers import Server, free_port

ARTIFACTS = Path(os.environ.get("LBHASH_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"
                                / "browser"))


# checked before any fixture runs, so that a machine without a browser does not train the run
pytestmark = [pytest.mark.browser, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


def give_a_mark(index_dir):
    """48 photos are too few to calibrate a same-picture mark on (docs/instance-codes.md, "The same picture"), so
    the index gets the record a larger one would calibrate: a centred cosine of 0.7 (the page shows what the index
    marks)."""
    from lbhash.instance import MARK_KEY

    index = CodeIndex.load(index_dir)
    assert index.metadata[MARK_KEY]["mark"] is None
    index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.7}
    index.save(index_dir)


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_image_run):
    """The tiny run's index, served. Its photos are noise on one colour, whose grayscale and framed views
    coincide across a colour's photos (three fifths of today's item embedding: lbhash.data.views), so an
    indexed photo would not find itself first; the index is built with the views an index built before
    them records (`gaussian-blur-0.8`, still served and added to as recorded), where it does: the page's
    tests ask what the page shows, and the views' own tests are tests/data/test_views.py and
    tests/encoders/test_export_ranking.py."""
    from lbhash.data.views import BLUR_VIEW
    from lbhash.indexes import index_dir
    from lbhash.runs import codes

    root = tmp_path_factory.mktemp("browser")
    tree, run = tiny_image_run
    with pytest.MonkeyPatch.context() as patch:
        for module in (codes, index_dir):
            patch.setattr(module, "ITEM_VIEW", BLUR_VIEW)
        assert cli("index", "build", run, "--out", root / "ix").exit_code == 0
    assert CodeIndex.load(root / "ix").metadata["item_view"] == BLUR_VIEW
    give_a_mark(root / "ix")
    server = Server(root / "ix", free_port(), "--run", run).start()
    yield server, tree, root
    server.kill()


def test_the_page_in_a_real_browser(browser, served, tmp_path):
    """A chosen image searches at once; classes are picked by name; "more like this" marks its
    query and goes in the address, which reloads to the same results; an add, a delete and
    failures each leave only their own line, in plain words; the docs render offline."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC

    server, tree, root = served
    started = time.monotonic()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page, seen = PageDriver(browser), []

    page.open(f"{server.url}/")
    page.wait.until(lambda d: page.text("ntotal") == "48")  # every training image, validation included
    page_text = page.js("return document.body.textContent")
    chance = json.loads((Path(server.extra[-1]) / "metrics.json").read_text())["chance_map"]
    assert f"; a random ranking: {chance:.3f})" in page_text, page_text[page_text.find("mAP"):][:200]
    assert page.by_id("add").is_displayed()  # an image index: images can be added
    assert ("(over the database items, not the queries; 0: two class centers coincide, above 4: the "
            "database's classes fully apart)") in page_text  # the bound's scale
    record = read_sources(CodeIndex.load(root / "ix"))  # read only: the server owns it
    # the run puts a class's items at one code, and ties go by id: query with the red item of lowest id
    own_id = min(i for i in range(100) if (record.source(i) or "").startswith(f"{tree}/train/red/"))
    query = Path(record.source(own_id))

    # 1. k = 5, then choosing the query image searches: no click, and one request (thumbnails aside)
    k = page.by_id("how-value")
    k.clear()
    k.send_keys("5")
    seen += requests_seen(browser)
    page.act(page.by_id("query-file").send_keys, str(query))
    assert not page.error(), page.error()
    page.wait.until(lambda d: len(page.cards()) == 5 and all(w > 0 for w in page.thumbnails()))
    asked = requests_seen(browser)
    seen += asked
    thumbnail = re.compile(r"/items/\d+/image")
    assert [u[len(server.url):] for u in asked if u.startswith(server.url + "/") and not thumbnail.search(u)
            ] == ["/search/image"], asked
    browser.save_screenshot(str(ARTIFACTS / "1-image-search.png"))
    assert page.thumbnails() == [32] * 5  # real decoded 32x32 images
    assert page.text("status") == f"5 results for {query.name}." and browser.current_url.endswith("/?mode=image&k=5")
    first = page.cards()[0]
    assert first.get_attribute("data-id") == str(own_id) and "query" not in first.get_attribute("class")
    assert first.find_element(By.CSS_SELECTOR, ".distance").get_attribute("data-distance") == "0"
    # the very picture, ranked by both codes and the floats: marked as such
    assert first.find_elements(By.CSS_SELECTOR, ".badge.same"), "the query picture itself is not marked"
    source = first.find_element(By.CSS_SELECTOR, ".source")
    assert source.get_attribute("data-source") == str(query) and source.text == "train/red/" + query.name
    width, height, rgba = page.first_thumbnail_pixels()
    from PIL import Image

    expected = np.array(Image.open(query).convert("RGB"))
    np.testing.assert_array_equal(np.array(rgba, np.uint8).reshape(height, width, 4)[..., :3], expected)
    assert len(page.text("query-bits").replace(" ", "")) == 16
    assert "The search took" in page.text("timing") and page.by_id("histogram").is_displayed()
    assert page.js("return document.getElementById('query-preview').naturalWidth") == 32
    for card in page.cards():  # the labels and codes shown are the index's
        truth = httpx.get(f"{server.url}/items/{card.get_attribute('data-id')}").json()
        assert card.get_attribute("data-labels") == ",".join(map(str, truth["labels"]))
        assert card.find_element(By.CSS_SELECTOR, ".labels").text.startswith(f"labels: {truth['labels'][0]} ")
        assert card.find_element(By.CSS_SELECTOR, ".code").text == truth["code"]
    seen += requests_seen(browser)

    # 2. a class picked by its name searches again and leaves only that class
    page.by_id("options").find_element(By.TAG_NAME, "summary").click()
    green = next(c for c in page.all("#class-list label") if c.text == "green")
    page.act(green.click)
    assert not page.error(), page.error()
    assert all(c.get_attribute("data-labels") == "1" for c in page.cards()) and len(page.cards()) == 5
    assert "1 green" in page.cards()[0].find_element(By.CSS_SELECTOR, ".labels").text
    # the index keeps the backbone's features, so an image search is re-scored by default
    assert page.text("options-summary") == "1 green; re-scored" and browser.current_url.endswith("&labels=1")
    browser.save_screenshot(str(ARTIFACTS / "2-class-filter.png"))
    page.act(green.click)  # all classes again (it searches again too)
    page.by_id("options").find_element(By.TAG_NAME, "summary").click()

    # 3. "more like this" from a card, by the keyboard: the item is the query, marked, not a hit
    target = int(page.cards()[1].get_attribute("data-id"))
    page.act(page.cards()[1].find_element(By.CSS_SELECTOR, "button.more").send_keys, Keys.ENTER)
    query_card = page.cards()[0]
    assert query_card.get_attribute("data-id") == str(target) and "query" in query_card.get_attribute("class")
    assert query_card.find_element(By.CSS_SELECTOR, ".badge").text == "query"
    hits = page.hit_ids()
    assert len(hits) == 5 and target not in hits and f"item {target}" in page.text("status")
    same_code = [int(i) for i in CodeIndex.load(root / "ix").ids() if record.source(int(i)) and
                 Path(record.source(int(i))).parent == Path(record.source(target)).parent and i != target]
    assert set(hits) <= set(same_code)  # its own class, at distance 0
    # ranked by the item's stored embedding and its instance code (the index keeps both): blended_search's order
    stored = CodeIndex.load(root / "ix")
    q = ranked_queries(stored.get_codes([target]), stored.get_embeddings([target]).astype(float), True,
                       index_transform(stored))
    want = blended_search(stored, q, 6).ids[0]
    assert q.instance is not None and page.js("return document.getElementById('looks-like').value") == str(LOOKS_LIKE)
    first_hit = page.all("#grid li.hit")[0]
    assert first_hit.find_element(By.CSS_SELECTOR, ".score").text.startswith("score ")
    assert hits == [int(i) for i in want if i != target][:5]
    assert browser.current_url.endswith(f"/?item={target}&k=5")
    # the looks-like slider, let go at 0 (same class first), searches again by itself: blended_search's order at 0
    page.by_id("options").find_element(By.TAG_NAME, "summary").click()
    page.act(page.js, "const s = document.getElementById('looks-like'); s.value = '0'; "
                      "s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change'));")
    at_zero = [int(i) for i in blended_search(stored, q, 6, looks_like=0.0).ids[0] if i != target][:5]
    assert page.hit_ids() == at_zero and page.text("looks-like-value") == "0"
    page.act(page.js, f"const s = document.getElementById('looks-like'); s.value = '{LOOKS_LIKE}'; "
                      "s.dispatchEvent(new Event('change'));")
    assert page.hit_ids() == hits  # back at the index's default: the order above
    page.by_id("options").find_element(By.TAG_NAME, "summary").click()
    # the address is the result: loading it again searches again
    page.open(browser.current_url, actions=2)
    assert page.cards()[0].get_attribute("data-id") == str(target) and page.hit_ids() == hits
    assert page.by_id("mode-item").is_selected() and page.by_id("how-value").get_attribute("value") == "5"
    page.act(page.all("#grid li.hit button.more")[0].send_keys, Keys.ENTER)
    assert browser.current_url.endswith(f"/?item={hits[0]}&k=5") and page.cards()[0].get_attribute("data-id") == str(hits[0])
    page.act(browser.back)  # back: the address before, searched again
    assert page.cards()[0].get_attribute("data-id") == str(target) and page.hit_ids() == hits
    page.open(f"{server.url}/?item={target}&k=3&labels=2", actions=2)  # a link with a filter ticks its class
    assert page.by_id("class-2").is_selected() and page.text("options-summary") == "2 red; re-scored"
    assert len(page.hit_ids()) == 3 and all(c.get_attribute("data-labels") == "2" for c in page.all("#grid li.hit"))

    # 4. add an image: its own line; the next action's failure clears it and is said in plain words
    new_image = tmp_path / "new-yellow.png"
    Image.fromarray(noisy(np.random.default_rng(5), (220, 200, 40))).save(new_image)
    page.by_id("add-files").send_keys(str(new_image))
    page.by_id("add-labels").send_keys("3")
    page.act(page.by_id("add-button").click)
    assert page.text("ntotal") == "49" and page.text("status").startswith("Added 1 image(s) as id 48"), page.error()
    page.wait.until(lambda d: len(page.cards()) == 1 and all(w > 0 for w in page.thumbnails()))
    added = page.cards()[0]
    assert added.get_attribute("data-id") == "48" and added.get_attribute("data-labels") == "3"
    assert added.find_element(By.CSS_SELECTOR, ".source").text == "uploaded: new-yellow.png"
    browser.save_screenshot(str(ARTIFACTS / "3-added.png"))
    page.by_id("mode-code").click()
    page.by_id("query-code").send_keys("zz00")
    page.act(page.by_id("search-button").click)
    assert page.error() == "The search failed: the code is not a hex string."
    assert page.by_id("error").get_attribute("data-detail") == "POST /search: 400 codes[0] is not a hex string"
    assert page.text("status") == "" and "Added" not in page.text("search-form") + page.text("results")
    browser.save_screenshot(str(ARTIFACTS / "4-error.png"))
    (tmp_path / "notes.txt").write_text("not an image")
    page.by_id("mode-image").click()
    page.act(page.by_id("query-file").send_keys, str(tmp_path / "notes.txt"))
    assert page.error() == ("The image search failed: notes.txt: cannot decode image (not an image in a "
                            "format Pillow reads)."), page.error()
    page.by_id("mode-item").click()
    item = page.by_id("query-item")
    item.clear()
    page.act(item.send_keys, "999", Keys.ENTER)
    assert page.error() == "Item 999 could not be read: id 999 is not in the index."
    k = page.by_id("how-value")
    k.clear()
    page.act(k.send_keys, "0", Keys.ENTER)
    assert page.error() == "k must be a whole number, 1 or more."
    page.by_id("mode-code").click()
    code = page.by_id("query-code")
    code.clear()
    code.send_keys(httpx.get(f"{server.url}/items/{own_id}").json()["code"])
    k.clear()
    page.act(k.send_keys, "1000000", Keys.ENTER)  # over the service's limit: its words
    max_k = httpx.get(f"{server.url}/about").json()["limits"]["max_k"]
    assert page.error() == f"The search failed: k must be at most {max_k}, got 1000000."

    # 5. delete the added image from its card; the page and the service agree
    page.open(f"{server.url}/?item=48&k=1", actions=2)
    page.all("#grid li.query button.delete")[0].click()
    page.wait.until(EC.alert_is_present())
    browser.switch_to.alert.accept()
    page.wait.until(lambda d: page.text("ntotal") == "48" and not page.all("#grid li.query"))
    assert httpx.get(f"{server.url}/items/48").status_code == 404
    assert page.text("status") == "Deleted item 48; the index holds 48 codes."
    seen += requests_seen(browser)

    # 6. the API docs render their operations offline
    browser.get(f"{server.url}/docs")
    page.wait.until(lambda d: len(page.all(".opblock-summary-path")) >= 10)
    paths = {e.text.replace("\u200b", "") for e in page.all(".opblock-summary-path")}
    assert {"/search", "/items/{item_id}/image", "/about"} <= paths, paths
    browser.save_screenshot(str(ARTIFACTS / "5-docs.png"))
    browser.get(f"{server.url}/redoc")
    page.wait.until(lambda d: "/search/image" in d.find_element(By.TAG_NAME, "body").text)
    browser.save_screenshot(str(ARTIFACTS / "6-redoc.png"))
    time.sleep(0.5)  # let late requests (fonts, logos) show in the log
    seen += requests_seen(browser)

    outside = [u for u in seen if not u.startswith((server.url + "/", "data:", "blob:" + server.url))]
    assert seen and not outside, outside
    problems = [e["message"] for e in browser.get_log("browser")  # the 400s of step 4 are expected there
                if "Content Security Policy" in e["message"] or "Uncaught" in e["message"]]
    assert not problems, problems
    print(f"browser test: {time.monotonic() - started:.1f} s in the browser; screenshots in {ARTIFACTS}")


def test_a_drop_searches_and_a_link_to_a_code_reads_at_360_px(browser, served):
    """A file dropped on the page searches; a link to a code searches; at 360 px nothing scrolls
    sideways, the query bar stays in view, and "source not recorded" wraps between words."""
    from selenium.webdriver.common.by import By

    server, tree, root = served
    page = PageDriver(browser)
    record = read_sources(CodeIndex.load(root / "ix"))
    blue = min(i for i in range(100) if (record.source(i) or "").startswith(f"{tree}/train/blue/"))
    page.width(360)
    try:
        page.open(f"{server.url}/")
        assert page.js("return window.innerWidth") == 360 and page.sideways() == 0
        # the item's thumbnail is its image (32 x 32: never resized), so it lands on the item's own code
        page.act(page.drop, "#drop", f"/items/{blue}/image", "dropped.png")
        assert not page.error(), page.error()
        assert page.text("status") == "10 results for dropped.png." and page.hit_ids()[0] == blue
        assert page.by_id("query-preview").is_displayed() and page.sideways() == 0
        browser.save_screenshot(str(ARTIFACTS / "7-drop-360px.png"))

        # a link to a code; an item without a source among the hits
        item = httpx.get(f"{server.url}/items/{blue}").json()
        code = item["code"]  # the index keeps embeddings: an added item brings its own
        added = httpx.post(f"{server.url}/items", json={"codes": [code], "embeddings": [item["embedding"]], "ids": [900],
                                                        "labels": [[0]]})
        assert added.status_code == 200, added.text
        try:
            page.open(f"{server.url}/?code={code}&k=20", actions=2)
            assert page.by_id("mode-code").is_selected() and page.by_id("query-code").get_attribute("value") == code
            assert len(page.hit_ids()) == 20 and 900 in page.hit_ids() and page.sideways() == 0
            missing = page.all("#grid li[data-id='900'] .source")[0]
            assert missing.text == "source not recorded"
            page.js("arguments[0].style.width = '80px'", missing)  # narrower than the words together
            assert page.word_lines(missing) == [1, 1, 1]  # each word on one line
            assert page.js("return arguments[0].getBoundingClientRect().height", missing) > 1.5 * page.js(
                "return parseFloat(getComputedStyle(arguments[0]).lineHeight)", missing)  # it did wrap
            # the query bar stays in view at the foot of the results
            page.js("window.scrollTo(0, document.scrollingElement.scrollHeight)")
            bar = page.js("const r = document.getElementById('search-form').getBoundingClientRect();"
                          "const b = document.getElementById('search-button').getBoundingClientRect();"
                          "return [window.scrollY, r.top, b.bottom, window.innerHeight]")
            assert bar[0] > 500 and bar[1] == 0 and bar[2] < bar[3], bar
            page.by_id("options").find_element(By.TAG_NAME, "summary").click()
            assert page.sideways() == 0
            browser.save_screenshot(str(ARTIFACTS / "8-code-link-360px.png"))
        finally:
            assert httpx.delete(f"{server.url}/items/900").status_code == 200
    finally:
        page.width(None)


def test_a_feature_index_page(browser, tmp_path, rng):
    """An index of feature rows: no image form, classes by id, a row searches, "Details" shows
    the code's bits with those differing from the query's marked, and the query item marked."""
    from selenium.webdriver.common.by import By

    from index_fakes import FakeEncoder
    from lbhash.service import create_app

    encoder = FakeEncoder(dim=12, bits=16)
    rows = rng.standard_normal((30, 12))
    codes = encoder.encode(rows)
    index = CodeIndex(16)
    index.add(codes, labels=np.arange(30) % 3)
    index.save(tmp_path / "ix")
    page = PageDriver(browser)
    with served_in_thread(create_app(tmp_path / "ix", encoder)) as url:
        page.open(f"{url}/")
        assert not page.by_id("add").is_displayed() and not page.by_id("drop").is_displayed()
        assert page.by_id("mode-features").is_selected() and not page.by_id("mode-image").is_enabled()
        assert [c.get_attribute("textContent").strip() for c in page.all("#class-list label")] == [
            "class 0", "class 1", "class 2"]
        page.by_id("query-features").send_keys(", ".join(f"{x:.6f}" for x in rows[7]))
        page.act(page.by_id("search-button").click)
        assert not page.error(), page.error()
        query_code = encoder.encode(rows[7:8].round(6))[0]
        distances = np.unpackbits(codes ^ query_code, axis=1).sum(axis=1)
        expected = sorted(range(30), key=lambda i: (distances[i], i))[:10]
        assert page.hit_ids() == expected
        assert not page.all("#grid img") and not page.all("#grid .source")  # no images, no sources to name
        # the larger view of a hit that differs: its marked bits are where the codes differ
        far = next(c for c in page.cards() if int(c.find_element(By.CSS_SELECTOR, ".distance").text.split()[1]) > 0)
        far_id = int(far.get_attribute("data-id"))
        far.find_element(By.CSS_SELECTOR, "button.view").click()
        page.wait.until(lambda d: page.by_id("viewer").is_displayed())
        differ = np.unpackbits(codes[far_id] ^ query_code, bitorder="little")
        marked = page.js("return [...document.querySelectorAll('#viewer mark')].map(m => m.title)")
        assert marked == [f"bit {j} differs" for j in np.flatnonzero(differ)] and len(marked) == distances[far_id]
        page.by_id("viewer-close").click()
        assert not page.by_id("viewer").is_displayed()
        # a link to an item: the item first, marked, and not among its hits
        page.width(360)
        try:
            page.open(f"{url}/?item=4&k=3", actions=2)
            assert page.cards()[0].get_attribute("data-id") == "4" and "query" in page.cards()[0].get_attribute("class")
            assert len(page.hit_ids()) == 3 and 4 not in page.hit_ids() and page.sideways() == 0
            browser.save_screenshot(str(ARTIFACTS / "9-features-360px.png"))
        finally:
            page.width(None)


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
        wait.until(lambda d: d.find_element(By.ID, "ntotal").text == "48")
        query = next(Path(tree).rglob("*.png"))
        k = browser.find_element(By.ID, "how-value")
        k.clear()
        k.send_keys("3")
        browser.find_element(By.ID, "query-file").send_keys(str(query))  # which searches
        decoded = ("return [...document.querySelectorAll('#grid img.thumb')]"
                   ".map(i => i.complete && i.src.startsWith('blob:') ? i.naturalWidth : -1)")
        wait.until(lambda d: d.execute_script(decoded) == [32] * 3)  # fetched with the key
        assert not EC.alert_is_present()(browser)  # asked once per tab
    finally:
        locked.kill()
    assert "read-key-of-the-page-test" not in locked.log


def test_the_page_through_an_export_answers_as_through_the_run(browser, served, tmp_path):
    """Issue 68: `serve --encoder EXPORT` (the export outputs the embedding beside the hash layer)
    ranks the page's image searches as `serve --run` does: the same ids in the same order and the same
    marks, each query chosen in the query bar of each server's page. Queries: indexed photos (each finds
    itself first, marked the same picture) and a mirrored copy of one."""
    from PIL import Image

    from lbhash.runs.run_dir import RunDirectory

    _, tree, root = served
    run = served[0].extra[-1]
    RunDirectory(run).export(tmp_path / "export")
    queries = sorted((Path(tree) / "train").rglob("*.png"))[::7][:4]  # indexed photos
    mirrored = tmp_path / "mirrored.png"
    Image.open(queries[0]).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(mirrored)
    queries.append(mirrored)
    answers = {}
    for name, model in (("run", ("--run", run)), ("export", ("--encoder", tmp_path / "export"))):
        shutil.copytree(root / "ix", tmp_path / f"ix-{name}")
        server = Server(tmp_path / f"ix-{name}", free_port(), *model).start()
        try:
            page = PageDriver(browser)
            page.open(f"{server.url}/")
            page.wait.until(lambda d: page.text("ntotal") != "")
            k = page.by_id("how-value")
            k.clear()
            k.send_keys("8")
            answers[name] = []
            for query in queries:
                page.act(page.by_id("query-file").send_keys, str(query))
                assert not page.error(), page.error()
                page.wait.until(lambda d: page.text("status").endswith(f"results for {query.name}."))
                answers[name].append((page.hit_ids(), [c.find_elements("css selector", ".badge.same") != []
                                                       for c in page.cards()]))
        finally:
            server.kill()
    assert answers["export"] == answers["run"]
    assert all(len(ids) == 8 for ids, _ in answers["run"])
    record = read_sources(CodeIndex.load(tmp_path / "ix-run"))
    for query, (ids, same) in zip(queries[:-1], answers["run"]):  # an indexed photo finds itself first, marked
        assert record.source(ids[0]) == str(query) and same[0]
