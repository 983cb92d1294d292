"""Helpers for the dashboard tests: a coordinator with the web routes, a fake engine and
a headless Debian Chromium driven by Selenium."""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from netcheck.config import Profile
from netcheck.engines.fingerprint import Fingerprint
from netcheck.lab.testing import RunningCoordinator, running_coordinator

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Flags for Chromium on a machine without network or display (docs/dashboard.md).
CHROME_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)  # fmt: skip


class FakeEngine:
    """Answers each prompt with tokens derived from its hash (deterministic, instant)."""

    def __init__(self, profile: Profile) -> None:
        self.batch_size = profile.batch_size
        self.max_new_tokens = profile.max_new_tokens
        self.fingerprint: Fingerprint = {
            "engine": "fake",
            "batch_size": profile.batch_size,
            "prompt_len": profile.prompt_len,
            "max_new_tokens": profile.max_new_tokens,
        }

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        n = self.max_new_tokens
        return [list((hashlib.sha512(p.encode()).digest() * 4)[:n]) for p in prompts]


@contextlib.asynccontextmanager
async def web_coordinator(
    tmp_path: Path, profiles: Sequence[Profile], **kwargs: Any
) -> AsyncIterator[RunningCoordinator]:
    """:func:`running_coordinator` (its app always has the dashboard routes:
    :func:`netcheck.coordinator.assembly.make_app`)."""
    async with running_coordinator(tmp_path, profiles, **kwargs) as rc:
        yield rc


def chrome_driver(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium WebDriver on Debian's chromium + chromedriver (never downloads)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--window-size={width},{height}")
    opts.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='netcheck-chrome-')}")
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
