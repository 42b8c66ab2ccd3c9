"""The headless Chromium the page tests drive (Debian's ``chromium`` works offline)."""

from __future__ import annotations

import os
import shutil

import pytest

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"]


def chromium() -> str:
    """The path of a Chromium (``$SA_CONV_CHROMIUM`` first); skips the test where there is none."""
    for name in (os.environ.get("SA_CONV_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    pytest.skip("no Chromium found (install Debian's chromium, or set SA_CONV_CHROMIUM)")
