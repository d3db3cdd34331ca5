"""The search page of `dmlplug serve` in a real browser: Debian's chromium, headless, driven by selenium through
Debian's chromedriver (.ci/run installs both). Upload an image, wait for the matches, check the top one, keep a
screenshot (test-artifacts/serve-page.png)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from serve import Server

from dmlplug.cli import main as dmlplug_main

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                                reason="Debian's chromium and chromium-driver are missing (.ci/run installs them)")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    # The system driver, given explicitly: selenium never downloads a browser or a driver.
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def test_the_page_shows_the_matches_of_an_uploaded_image(onnx_bundle, image_folder, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    shutil.copytree(image_folder, tmp_path / "gallery")
    try:
        dmlplug_main(["index", str(onnx_bundle), str(tmp_path / "gallery"), "--out", str(tmp_path / "index"),
                      "--quiet"])
    except SystemExit as exc:
        assert not exc.code
    query = tmp_path / "gallery" / "b" / "img003.png"
    with Server(onnx_bundle, tmp_path / "index", log=tmp_path / "log") as server:
        expected = httpx.post(server.url + "v1/search", files=[("images", (query.name, query.read_bytes(),
                                                                          "image/png"))],
                              data={"k": "8"}).json()["results"][0]["matches"]
        browser.get(server.url)
        WebDriverWait(browser, 30).until(lambda b: "gallery items" in b.find_element(By.ID, "info").text)
        browser.find_element(By.ID, "file").send_keys(str(query))
        WebDriverWait(browser, 60).until(expected_conditions.presence_of_all_elements_located(
            (By.CSS_SELECTOR, "#results li")))
        items = browser.find_elements(By.CSS_SELECTOR, "#results li")
        assert [int(item.get_attribute("data-id")) for item in items] == [m["id"] for m in expected]
        top = items[0]
        assert top.get_attribute("class") == ("accepted" if expected[0]["accepted"] else "rejected")
        assert f"similarity {expected[0]['similarity']:.4f}" in top.text and expected[0]["stored_path"] in top.text
        assert "embedding" in browser.find_element(By.ID, "status").text  # the query's embedding time
        # Every thumbnail loaded from the server (naturalWidth is 0 for an image that failed).
        assert browser.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)")
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "serve-page.png"))
        assert server.stop() == 0
