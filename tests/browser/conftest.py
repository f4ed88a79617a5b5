"""The browser tests' shared fixtures: Playwright driving Debian's Chromium (nothing downloaded at run time), one
browser per session, and where screenshots go.

Needs /usr/bin/chromium (or UPROBE_LAB_CHROMIUM) and the playwright package; the tests are skipped with the reason
otherwise."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("UPROBE_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


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


@pytest.fixture(scope="session")
def screenshot_dir():
    d = Path(os.environ.get("UPROBE_LAB_SCREENSHOTS") or Path(__file__).parent / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser screenshots: {d}")
    return d
