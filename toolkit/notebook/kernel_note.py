"""One line a widget shows when the kernel that drew it is gone (a notebook re-opened after its kernel died).

A saved notebook restores its widgets from the saved widget state, with no kernel behind them:
their buttons then do nothing, silently. ipywidgets marks the view of every widget whose link to
the kernel (its comm) is not live with the CSS class ``jupyter-widgets-disconnected``: restored
from a notebook, after the kernel restarted or died. :func:`kernel_note` is an HTML widget whose
line is hidden by a style rule and shown under that class, so it appears exactly when the
widget has no kernel, in the browser, without a round trip to the kernel. Re-opened while its
kernel still runs, JupyterLab reconnects the widgets and the line stays hidden.
"""

from __future__ import annotations

from html import escape
from typing import Any

GONE = ("The kernel that ran this panel is gone (the notebook was re-opened or its kernel restarted): "
        "its buttons do nothing. Re-run this cell to use it again.")
CLASS = "prunelab-kernel-gone"
DISCONNECTED = "jupyter-widgets-disconnected"  # set by ipywidgets on a view whose comm is not live
STYLE = (f"<style>.{CLASS}{{display:none}}.{DISCONNECTED} .{CLASS}{{display:block;padding:4px 8px;margin:2px 0;"
         "border-left:4px solid #b2182b;background:#fdf0f0;color:#67001f;font-weight:bold}</style>")


def kernel_note_html() -> str:
    """The note's HTML: the style rule and the (hidden unless disconnected) line."""
    return f'{STYLE}<div class="{CLASS}">{escape(GONE)}</div>'


def kernel_note() -> Any:
    """An ``ipywidgets.HTML`` with :func:`kernel_note_html` (ipywidgets is imported here: R18)."""
    import ipywidgets as w

    return w.HTML(kernel_note_html(), layout=w.Layout(width="calc(100% - 8px)"))
