"""The page's duplicates view in a real browser (issue 88, item 3): headless Chromium, as
tests/service/test_page_browser.py drives it, against a small index with planted copies served in the
test process (tests/copies_helpers.py; its copies' files are copies of their photos' files).

Skips, saying why, when Selenium, Chromium or its driver is missing; `make test-browser` runs it.
"""

import os
from pathlib import Path

import httpx
import numpy as np
import pytest

from browser_helpers import MISSING, PageDriver, headless_chromium, served_in_thread
from copies_helpers import copies_index
from page_helpers import make_image_tree

ARTIFACTS = Path(os.environ.get("LBHASH_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"
                                / "browser"))
# 3 copies of photo 0, 2 of photo 1, one each of photos 2-10: 11 groups, more than the view's page of 10
OWNERS = (0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]

GROUPS = "return [...document.querySelectorAll('#dup-groups li.dup-group')].map(g => g.dataset.items)"
# the first two groups' thumbnails as the browser decoded them: [id, width, its pixels' sum] (-1: not loaded
# yet; those further down load when scrolled to)
PIXELS = """return [...document.querySelectorAll('#dup-groups li.dup-group:nth-child(-n+2) li.dup-item')].map(li => {
  const img = li.querySelector('img.thumb');
  if (!img || !img.complete || !img.naturalWidth) return [Number(li.dataset.id), -1, 0];
  const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  return [Number(li.dataset.id), c.width, g.getImageData(0, 0, c.width, c.height).data.reduce((a, b) => a + b, 0)];
});"""


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


def test_the_duplicates_view_shows_the_planted_copies(browser, tmp_path):
    """The button opens the groups, largest first, each a row of thumbnails (a copy's equal to its photo's)
    with its ids and pairs; the pages go on and back, their address loads again, and an item searches."""
    from lbhash.service import create_app

    tree = make_image_tree(tmp_path / "imgs", train=16, test=0)  # 64 images: 50 photos and 14 copies
    path, _ = copies_index(tmp_path / "ix", np.random.default_rng(3), n=50, owners=OWNERS, tree=tree)
    page = PageDriver(browser)
    with served_in_thread(create_app(path)) as url:
        want = httpx.get(f"{url}/duplicates", params={"limit": 100}, timeout=30).json()
        assert want["total"] == 11 and want["groups"][0]["items"] == [0, 50, 51, 52]
        page.open(f"{url}/")
        assert page.by_id("results").is_displayed() and not page.by_id("duplicates").is_displayed()
        page.act(page.by_id("duplicates-button").click)
        assert not page.error(), page.error()
        assert page.by_id("duplicates").is_displayed() and not page.by_id("results").is_displayed()
        shown = [",".join(map(str, g["items"])) for g in want["groups"]]
        assert page.js(GROUPS) == shown[:10]
        assert page.text("dup-page") == "groups 1-10 of 11" and "11 groups of copies among 64 items" in \
            page.text("duplicates-summary")
        first = page.all("#dup-groups li.dup-group")[0]
        assert first.find_element("css selector", "h3").text == "Group 1: 4 items"
        assert "0 & 5" in first.find_element("css selector", ".dup-pairs").text  # its pairs, with similarities
        page.wait.until(lambda d: all(width > 0 for _, width, _ in page.js(PIXELS)))
        pixels = {i: s for i, _, s in page.js(PIXELS)}
        assert pixels[0] == pixels[50] == pixels[51] == pixels[52] and pixels[1] == pixels[53] != pixels[0]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "10-duplicates.png"))
        # the next page, its address, and back
        assert page.by_id("dup-prev").get_property("disabled")
        page.act(page.by_id("dup-next").click)
        assert page.js(GROUPS) == shown[10:] and page.text("dup-page") == "groups 11-11 of 11"
        assert browser.current_url.endswith("/?duplicates=10") and page.by_id("dup-next").get_property("disabled")
        page.open(f"{url}/?duplicates=10", actions=2)
        assert page.js(GROUPS) == shown[10:] and page.by_id("duplicates").is_displayed()
        page.act(page.by_id("dup-prev").click)
        assert page.js(GROUPS) == shown[:10] and browser.current_url.endswith("/?duplicates=0")
        # an item of a group searches with it: the item first, its copies marked the same picture
        page.act(page.all("#dup-groups li.dup-item[data-id='0'] button")[0].click)
        assert not page.error(), page.error()
        assert page.by_id("results").is_displayed() and not page.by_id("duplicates").is_displayed()
        assert page.cards()[0].get_attribute("data-id") == "0" and browser.current_url.endswith("/?item=0&k=10")
        same = {int(c.get_attribute("data-id")) for c in page.cards() if c.find_elements("css selector", ".badge.same")}
        assert same == {50, 51, 52}, same
        # the button back from the view: the results as they were
        page.act(page.by_id("duplicates-button").click)
        page.by_id("duplicates-button").click()
        assert page.by_id("results").is_displayed() and browser.current_url.endswith("/?item=0&k=10")
