"""Shared helpers for driving the dashboard in headless Chromium (tests and the screenshot script).

Chromium comes from Debian (``apt-get install chromium``), never from Playwright's downloader.

The live-progress tests hold their runs with :class:`gate.Gate` (re-exported here) so the page is
checked in a state the test chose, not in whatever a redraw happened to catch.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.helpers.gate import Gate, registered  # noqa: F401 - re-exported for the browser tests

# Records, from the moment of the click, every change of the run status and the heat-map title.
WATCH_JS = """() => {
  window._watch = []; const t0 = performance.now();
  const note = () => {
    const title = document.querySelector('#run-heatmap .gtitle');
    const status = document.querySelector('#run-status');
    window._watch.push([performance.now() - t0, title ? title.textContent : '', status ? status.innerText : '']);
  };
  for (const id of ['#run-heatmap', '#run-status'])
    new MutationObserver(note).observe(document.querySelector(id),
                                       {subtree: true, childList: true, characterData: true});
  document.querySelector('#run-button').click();
}"""


def chromium_path() -> str | None:
    """The Debian chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(runs_dir: str, model: str = "tiny-llama") -> Iterator[str]:
    """The app on a free localhost port (engine imports warmed first); yields its URL."""
    from app.app import CSS, HEAD, build_app, warm_up

    warm_up().join()
    demo = build_app(default_model=model, runs_dir=runs_dir)
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, css=CSS,
                head=HEAD, footer_links=[])
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Debian Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def open_page(chromium: Any, url: str, width: int = 1500, height: int = 1100) -> Any:
    page = chromium.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector("#run-button")
    return page


def session_page(chromium: Any, url: str, width: int = 1500, height: int = 1100) -> Any:
    """A page in a fresh browser context (own cookies and storage): the app sees a separate session."""
    context = chromium.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("#run-button", state="visible")
    return page


def page_load_seconds(chromium: Any, url: str) -> tuple[float, float]:
    """A fresh context navigates to ``url``: seconds until the Run button is visible, and seconds until
    the server's HTML had arrived (the browser's navigation timing ``responseEnd``)."""
    context = chromium.new_context(viewport={"width": 1500, "height": 1100})
    try:
        page = context.new_page()
        start = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("#run-button", state="visible", timeout=60_000)
        total = time.perf_counter() - start
        document_ms = page.evaluate("performance.getEntriesByType('navigation')[0].responseEnd")
        return total, float(document_ms) / 1000.0
    finally:
        context.close()


def dom_click(page: Any, selector: str) -> None:
    """A DOM click, as a user's: Playwright's synthetic pointer input can time out on a starved renderer."""
    page.evaluate("(s) => document.querySelector(s).click()", selector)


def queue_position(page: Any) -> int | None:
    """The place in line the status line shows (``… queued · position k``), or None."""
    found = re.search(r"queued.*?position (\d+)", page.inner_text("#run-status"))
    return int(found.group(1)) if found else None


def pick(page: Any, dropdown: str, value: str) -> None:
    """Choose ``value`` in the Gradio dropdown with elem_id ``dropdown``."""
    page.click(f"#{dropdown} input")
    page.locator(f'li[aria-label="{value}"]').first.click()


def enter(page: Any, selector: str, text: str) -> None:
    """Type ``text`` into a Gradio field and leave it, as a user does before pressing a button.

    Gradio commits a field's value to the app state from its input/blur events; on a slow machine a
    click that follows ``fill`` at once can reach the server with the old value, so the field is
    left with Tab and read back before the caller goes on.
    """
    field = page.locator(selector).first
    field.wait_for(state="visible")  # inside a just-opened accordion the field mounts late
    for _ in range(3):
        field.fill(text)
        field.press("Tab")
        if _value_holds(page, field, text):
            return
    raise AssertionError(f"{selector} would not keep {text!r}; it shows {field.input_value()!r}")


def _value_holds(page: Any, field: Any, text: str, seconds: float = 1.0) -> bool:
    """True when ``field`` shows ``text`` and still does ``seconds`` later (a late re-render of a
    component that mounted as its accordion opened can put the default back)."""
    deadline = time.monotonic() + 10.0
    while field.input_value() != text and time.monotonic() < deadline:
        time.sleep(0.05)
    page.wait_for_timeout(int(seconds * 1000))
    return field.input_value() == text


def set_extra_options(page: Any, text: str) -> None:
    page.get_by_text("Method options").click()
    enter(page, "#run-extra textarea", text)


def status(page: Any, element: str = "#run-status") -> str:
    return page.inner_text(element)


def wait_for_text(page: Any, element: str, text: str, timeout: float = 120.0) -> str:
    """Poll ``element`` until it contains ``text``; return its text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = page.inner_text(element)
        if text in current:
            return current
        time.sleep(0.1)
    raise AssertionError(f"{element} never showed {text!r}; last: {page.inner_text(element)!r}")


def watch_run(page: Any) -> list[list[Any]]:
    """Click Run with :data:`WATCH_JS` recording, wait for the run to finish; the recorded changes
    ``[ms since the click, heat-map title, status text]``."""
    page.evaluate(WATCH_JS)
    wait_for_text(page, "#run-status", "✓ finished")
    return recorded(page)


def recorded(page: Any) -> list[list[Any]]:
    """What :data:`WATCH_JS` recorded so far: ``[ms since the click, heat-map title, status text]``."""
    return list(page.evaluate("window._watch"))


def wait_for_linears(page: Any, count: int, timeout: float = 120.0) -> str:
    """Poll the heat-map title until it counts ``count`` pruned linears; return the title."""
    deadline = time.monotonic() + timeout
    title = ""
    while time.monotonic() < deadline:
        title = page.text_content("#run-heatmap .gtitle") or ""
        found = re.search(r"(\d+) of \d+ linears", title)
        if found and int(found.group(1)) == count:
            return title
        time.sleep(0.1)
    status = page.inner_text("#run-status")
    raise AssertionError(f"the heat-map never counted {count} linears; last title: {title!r}; status: {status!r}")




def first_cell_seconds(watch: list[list[Any]]) -> float | None:
    """Seconds from the click to the first heat-map title counting a filled cell."""
    import re

    for when, title, _ in watch:
        found = re.search(r"(\d+) of (\d+) linears", title or "")
        if found and int(found.group(1)) >= 1:
            return when / 1000.0
    return None


def first_running_seconds(watch: list[list[Any]]) -> float | None:
    """Seconds from the click to the first status saying the run started (model and data loaded)."""
    for when, _, text in watch:
        if "running" in (text or ""):
            return when / 1000.0
    return None
