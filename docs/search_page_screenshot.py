"""Photograph the search page (docs/search-page.png) with headless Chromium.

How docs/search-page.png was made, from the repository root (CPU; about 10 minutes):

    python studies/rescore_photos.py ../shared/data/cifar10-jpg.tar.gz OUT   # OUT/run and OUT/idx
    lbhash serve OUT/idx --run OUT/run --port 8765 &
    python docs/search_page_screenshot.py http://127.0.0.1:8765 \\
        ../shared/data/cifar10-jpg.tar.gz:test/automobile/0007.jpg docs/search-page.png

then cropped to its left 930 pixels (the results; the right column shows the machine's paths).
QUERY is an image file, or TARBALL:MEMBER (test/automobile/0007.jpg is a query of that run, not
in its database).
Needs selenium and Debian's chromium and chromium-driver (as tests/service/test_page_browser.py).
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
import time
from pathlib import Path

from PIL import Image


def query_file(spec: str, folder: Path) -> Path:
    path, _, member = spec.partition(":")
    if not member:
        return Path(spec)
    with tarfile.open(path) as tar:
        data = tar.extractfile(tar.getmember(member)).read()
    out = folder / Path(member).name
    out.write_bytes(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("query", help="an image file, or TARBALL:MEMBER")
    parser.add_argument("out", type=Path)
    parser.add_argument("-k", type=int, default=12)
    parser.add_argument("--size", default="1280,1200", help="window width,height")
    args = parser.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={args.size}", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            query = query_file(args.query, Path(tmp))
            driver.get(args.url.rstrip("/") + "/")
            wait = WebDriverWait(driver, 60)
            done = lambda: int(driver.find_element(By.ID, "results").get_attribute("data-done") or 0)  # noqa: E731
            wait.until(lambda d: done() >= 1)
            k = driver.find_element(By.ID, "how-value")
            k.clear()
            k.send_keys(str(args.k))
            driver.find_element(By.ID, "query-file").send_keys(str(query))  # choosing the image searches
            wait.until(lambda d: done() >= 2)
            wait.until(lambda d: d.execute_script(
                "return [...document.querySelectorAll('#grid img.thumb')].every(i => i.complete && i.naturalWidth)"))
            driver.execute_script("window.scrollTo(0, 0)")
            time.sleep(0.5)
            png = driver.get_screenshot_as_png()
    finally:
        driver.quit()
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(256)  # a palette keeps the file small
    image.save(args.out, optimize=True)
    print(f"{args.out}: {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
