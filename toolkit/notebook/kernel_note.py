"""One line a widget shows when the kernel that drew it is gone (a notebook re-opened after its kernel died).

A saved notebook restores its widgets from the saved widget state, with no kernel behind them:
their buttons then do nothing, silently. :class:`KernelNote` is a small anywidget inside such a
panel. When the browser draws it, it sends a ping to the kernel; the widget's Python side answers.
The line stays hidden while an answer comes, or while the kernel is busy (a queued ping is
answered when the cell ends), and appears when the kernel is missing or dead, or is idle twice in a
row (2.5 s apart) without answering: the widget was restored from the notebook, not created by
this kernel.
"""

from __future__ import annotations

from functools import cache
from typing import Any

GONE = ("The kernel that ran this panel is gone (the notebook was re-opened or its kernel restarted): "
        "its buttons do nothing. Re-run this cell to use it again.")
CHECK_MS = 2500  # between two looks at the kernel
IDLE_LOOKS = 2  # idle looks without an answer before the line shows

ESM = """
function render({ model, el }) {
  const line = document.createElement("div");
  line.className = "prunelab-kernel-gone";
  line.style.cssText = "display:none;padding:4px 8px;margin:2px 0;border-left:4px solid #b2182b;" +
    "background:#fdf0f0;color:#67001f;font-weight:bold";
  line.textContent = model.get("message");
  el.appendChild(line);
  let answered = false, idle = 0;
  const onMessage = (content) => {
    if (content && content.pong) { answered = true; line.style.display = "none"; }
  };
  model.on("msg:custom", onMessage);
  const kernel = () => (model.widget_manager ? model.widget_manager.kernel : undefined);
  const look = () => {
    if (answered) return;
    const k = kernel();
    if (k === null || (k && (k.isDisposed || k.status === "dead" || k.status === "unknown"))) {
      line.style.display = "block";
      return;
    }
    idle = k && k.status === "busy" ? 0 : idle + 1;
    if (idle >= IDLE_LOOKS) { line.style.display = "block"; return; }
    setTimeout(look, CHECK_MS);
  };
  try { model.send({ ping: 1 }); } catch (error) { line.style.display = "block"; return; }
  setTimeout(look, CHECK_MS);
  return () => model.off("msg:custom", onMessage);
}
export default { render };
""".replace("CHECK_MS", str(CHECK_MS)).replace("IDLE_LOOKS", str(IDLE_LOOKS))


def kernel_note() -> Any:
    """A new ``KernelNote`` widget."""
    return _note_class()()


@cache
def _note_class() -> type:
    """The KernelNote widget class, made once (anywidget is imported here, not at module import: R18)."""
    import anywidget
    import traitlets

    class KernelNote(anywidget.AnyWidget):
        """Hidden while the kernel answers; says :data:`GONE` when the panel outlived its kernel."""

        _esm = ESM
        message = traitlets.Unicode(GONE).tag(sync=True)

        def __init__(self) -> None:
            super().__init__()
            self.on_msg(answer)

    return KernelNote


def answer(widget: Any, content: Any, buffers: Any = None) -> None:
    """The kernel's side of the check: a ping from the browser gets a pong back."""
    del buffers
    if isinstance(content, dict) and "ping" in content:
        widget.send({"pong": content["ping"]})
