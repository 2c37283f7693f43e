"""Fixtures of the browser tests: one headless Chromium per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.browser_app import browser


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Debian Chromium per browser test module."""
    with browser() as instance:
        yield instance
