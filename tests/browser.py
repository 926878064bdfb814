"""Debian's headless Chromium driven by Playwright, for the dashboard's tests and its benchmark script.

``chromium()`` launches /usr/bin/chromium (``playwright install`` cannot download browsers here);
``Watched`` opens a page, records every console error, page error and failed request, and waits for
the ``data-ready`` attribute the dashboard sets once its charts are drawn.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-dev-shm-usage", "--no-first-run", "--disable-default-apps", "--disable-extensions"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
"""Where tests leave screenshots (git-ignored)."""
VIEWPORT = {"width": 1280, "height": 900}


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Watched:
    """A fresh page (its own context: empty cache, no cookies) whose problems are recorded in ``errors``."""

    def __init__(self, browser: Browser, *, offline: bool = False) -> None:
        self.context = browser.new_context(viewport=VIEWPORT, offline=offline)
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))
        self.page.on("response", lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)

    def open(self, url: str, *, timeout_s: float = 30.0) -> float:
        """Go to ``url`` and wait until its charts are drawn; milliseconds from navigation to data-ready."""
        self.page.goto(url)
        return self.wait_ready(timeout_s=timeout_s)

    def wait_ready(self, *, timeout_s: float = 30.0) -> float:
        self.page.wait_for_selector("body[data-ready]", state="attached", timeout=timeout_s * 1000)
        return float(self.page.get_attribute("body", "data-ready-ms") or "nan")

    def screenshot(self, name: str, folder: Path = ARTIFACTS) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the whole session."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (.ci/run installs it)")
    with chromium() as b:
        yield b


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    w = Watched(browser)
    yield w
    w.close()
