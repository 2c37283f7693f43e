"""Work a notebook panel runs in a background thread, so its Cancel button stays responsive.

:class:`BackgroundPanel` gives a panel ``start`` (run ``self.run`` in a daemon thread, refused
while one is going on; the run's memory is given back when it ends) and ``cancel`` (set the
cancel token that ``run`` handed to the toolkit).
The dashboard and the recovery panel share it.
"""

from __future__ import annotations

import threading
from typing import Any

from toolkit.api import CancelToken
from toolkit.runtime.release import release_memory


class BackgroundPanel:
    """A panel whose ``run(**overrides)`` is started in a thread by a button; ``busy`` says one is going on."""

    busy = "A run is going on; cancel it first."
    status: Any  # the panel's ipywidgets.HTML status line

    def __init__(self) -> None:
        self._token: CancelToken | None = None
        self._thread: threading.Thread | None = None

    def run(self, **overrides: Any) -> Any:
        """The panel's work in this cell; it sets ``self._token`` to the token it passes to the toolkit."""
        raise NotImplementedError

    def start(self, **overrides: Any) -> None:
        """Run in a background thread (what the panel's button does) so Cancel stays responsive."""
        if self._thread is not None and self._thread.is_alive():
            self.status.value = f"<b>{self.busy}</b>"
            return
        self._thread = threading.Thread(target=self._run_then_release, kwargs=overrides, daemon=True)
        self._thread.start()

    def _run_then_release(self, **overrides: Any) -> None:
        try:
            self.run(**overrides)
        finally:  # the kernel lives on between runs: give the run's model and activations back
            release_memory()

    def cancel(self) -> None:
        """Stop the work at its next cancellation point (its run is recorded as cancelled)."""
        if self._token is not None:
            self._token.cancel()
