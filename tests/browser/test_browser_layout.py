"""The dashboard at a laptop's 1440 × 900 in headless Chromium: what must stay on screen.

The Run button stays in view when the method options open, and the Runs table shows perplexity
without scrolling sideways however long a run's options are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.browser_app import chromium_path, open_page, pick, serve
from tests.helpers.synthetic_runs import write_run

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
WIDTH, HEIGHT = 1440, 900
OPTIONS = {"xi": 0.3, "rounds": 5, "warm_start": True, "lam_low": 1e-5, "lam_high": 10.0, "max_iter": 200,
           "tolerance": 1e-6, "damp_frac": 0.01}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    runs_dir = tmp_path_factory.mktemp("runs")
    write_run(runs_dir, {"model": "tiny-llama", "method": "fista", "sparsity": "50%", "options": OPTIONS})
    write_run(runs_dir, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}, seed=1)
    with serve(str(runs_dir)) as address:
        yield address


def inside(page: Any, selector: str) -> tuple[bool, Any]:
    """Whether the element's whole box lies in the viewport, and the box."""
    box = page.locator(selector).first.bounding_box()
    fits = box is not None and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= WIDTH \
        and box["y"] + box["height"] <= HEIGHT
    return fits, box


def test_run_button_stays_in_view_when_method_options_open(url: str, chromium: Any) -> None:
    page = open_page(chromium, url, WIDTH, HEIGHT)
    pick(page, "run-method", "fista")  # the method with the most options
    page.get_by_text("Method options").click()
    page.wait_for_selector("#run-extra textarea")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    fits, box = inside(page, "#run-button")
    assert fits, f"the Run button is at {box}, outside the {WIDTH}×{HEIGHT} viewport"
    assert inside(page, "#cancel-button")[0]
    page.locator("#run-extra textarea").scroll_into_view_if_needed()  # down to the last option
    page.wait_for_timeout(500)
    fits, box = inside(page, "#run-button")
    assert fits, f"scrolled to the last option, the Run button is at {box}, outside the viewport"


def test_runs_table_shows_perplexity_without_scrolling(url: str, chromium: Any) -> None:
    page = open_page(chromium, url, WIDTH, HEIGHT)
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_selector("#runs-message:has-text('2 runs')")
    page.wait_for_timeout(500)
    headers = [th.inner_text().strip() for th in page.locator("#runs-table th").all()]
    assert headers.index("perplexity") < headers.index("options"), headers
    fits, box = inside(page, f"#runs-table th >> nth={headers.index('perplexity')}")
    assert fits, f"the perplexity header is at {box}, outside the {WIDTH}×{HEIGHT} viewport"
