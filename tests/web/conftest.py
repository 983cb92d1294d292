"""Fixtures for the dashboard tests: a headless Chromium (skipped when not installed)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from web_support import CHROMEDRIVER, CHROMIUM, chrome_driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for a test module; skipped without chromium/selenium."""
    pytest.importorskip("selenium")
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("Debian chromium + chromium-driver not installed (scripts/setup)")
    driver = chrome_driver()
    try:
        yield driver
    finally:
        driver.quit()
