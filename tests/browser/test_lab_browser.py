"""JupyterLab in headless Chromium: the quickstart's dashboard cell renders the widget, unclipped at 1440 px."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.browser_app import browser, chromium_path, free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium")]
WIDTH = 1440
DASHBOARD_CELL = 6  # cells up to the Dashboard() cell of 01_quickstart (markdown included), run with Shift+Enter


@contextmanager
def jupyter_lab(folder: Path) -> Iterator[str]:
    """``jupyter lab`` on ``folder`` at a free port, no token (localhost only); yields its URL."""
    port = free_port()
    config = folder.parent / "jupyter"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PRUNELAB_RUNS": str(folder / "runs"),
           "JUPYTER_CONFIG_DIR": str(config), "JUPYTERLAB_SETTINGS_DIR": str(config / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(config / "workspaces"), "JUPYTER_RUNTIME_DIR": str(config / "runtime")}
    root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers run as root
    log = folder.parent / "jupyter-lab.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={folder}", *root],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


def test_quickstart_dashboard_renders_in_jupyterlab(tmp_path: Path) -> None:
    notebooks = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks)
    subprocess.run([sys.executable, "-m", "nbconvert", "--clear-output", "--inplace",  # 01 is stored executed
                    str(notebooks / "01_quickstart.ipynb")], check=True, capture_output=True)
    with jupyter_lab(notebooks) as url, browser() as chromium:
        page = chromium.new_page(viewport={"width": WIDTH, "height": 900})
        page.goto(f"{url}/lab/tree/01_quickstart.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=120_000)  # the kernel is up
        page.locator(".jp-Notebook .jp-Cell").first.click()
        page.keyboard.press("Escape")
        for _ in range(DASHBOARD_CELL):
            page.keyboard.press("Shift+Enter")
        widget = page.locator(".jp-OutputArea-output .widget-vbox").filter(has_text="Pick a model").first
        try:
            widget.wait_for(timeout=180_000)
        finally:
            page.screenshot(path=str(tmp_path / "lab.png"))
        page.locator(".jp-OutputArea-output .js-plotly-plot").first.wait_for(timeout=60_000)
        output = widget.locator("xpath=ancestor::div[contains(@class, 'jp-OutputArea-output')]").first.bounding_box()
        box = widget.bounding_box()
        found = page.locator(".jp-OutputArea-output .js-plotly-plot")
        plots = [found.nth(i) for i in range(found.count()) if found.nth(i).is_visible()]
        assert output is not None and box is not None and len(plots) == 4  # structured panels stay hidden
        assert box["x"] + box["width"] <= output["x"] + output["width"] + 1  # the grid is not clipped
        for shown in plots:
            plot = shown.bounding_box()
            assert plot is not None and plot["width"] > 200 and plot["x"] + plot["width"] <= WIDTH
        overflowing = widget.evaluate(
            "node => [node, ...node.querySelectorAll('.widget-hbox, .widget-box')]"
            ".filter(n => n.scrollWidth > n.clientWidth + 1)"
            ".map(n => `${n.className} ${n.scrollWidth}>${n.clientWidth}`)")
        assert not overflowing
        for label in ("Run", "Cancel", "Save figures"):
            assert page.get_by_role("button", name=label, exact=True).first.is_visible()
