"""The browser tests' Playwright and Chromium: defined once here, so every test file of tests/browser shares one
Playwright session in a worker (a second sync_playwright() started while one runs fails: "Sync API inside the
asyncio loop")."""
import os

import pytest

from test_notebooks_in_browser import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def sync_playwright():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set UPROBE_LAB_CHROMIUM)")
    api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    return api.sync_playwright


@pytest.fixture(scope="session")
def browser(sync_playwright):
    with sync_playwright() as p:
        # Playwright gives the browser a fresh temporary profile (it refuses --user-data-dir with launch()).
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
