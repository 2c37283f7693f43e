"""A streamed output that changed is sent whole, never as edits of its previous value.

Gradio streams a generator's outputs as edit lists against each output's previous value
(``gradio.utils.diff``: key-level ``replace`` / ``add`` / ``delete`` inside a dict), and the page
applies every list to its own copy. Once the page's copy of a plot differs from the server's, every
later edit of that plot lands on the wrong base, and the plot stays stale for the rest of the run
while the status line (a string, which is always replaced whole) keeps moving. This was seen in
Chromium on the busy 2-core development machine: the server had sent the heat-map with 8 pruned
linears, and the page still showed 3 (or the empty grid) minutes later.

With :func:`whole_value_diff` installed, a changed value travels as one root ``replace``. Every
update then stands on its own, and the next one repairs any earlier loss. The cost is bandwidth:
a changed figure is sent whole (tens of kB), and the Run view already sends at most two figures a
tick. Unchanged outputs still send nothing.
"""

from __future__ import annotations

from typing import Any


def whole_value_diff(old: Any, new: Any) -> list[list[Any]]:
    """``[]`` when ``old == new``, else the one edit that replaces the whole value: ``[["replace", [], new]]``."""
    return [] if old == new else [["replace", [], new]]


def install() -> None:
    """Make Gradio send every changed streamed output whole (idempotent; process-wide)."""
    import gradio.utils

    gradio.utils.diff = whole_value_diff
