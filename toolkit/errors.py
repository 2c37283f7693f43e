"""Exceptions a user can act on (CONTRIBUTING.md R13): the message says what to change, with "did you mean" hints."""

import difflib
from collections.abc import Iterable


class ToolkitError(ValueError):
    """A user's mistake: bad model id, method, option, sparsity or data. Shown without traceback."""


class NumericalError(ToolkitError):
    """A solve failed even after the bounded damping escalation (R12)."""


class RunCancelled(Exception):  # no Error suffix: it is a signal, not an error
    """Raised at a cancellation point when the run's cancel token is set."""


class MachineFailure(ToolkitError):
    """The machine or a library failed a recorded run (disk full, out of memory): the CLI exits with 1, not 2."""


class DistributedError(ToolkitError):
    """A rank of a ``--distributed`` run disagreed, failed, died or timed out; the run is marked failed."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """" Did you mean: x?" or "" when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean: {close[0]}?" if close else ""
