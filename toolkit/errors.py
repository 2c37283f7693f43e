"""Exceptions a user can act on (STYLE R13): the message says what to change."""


class ToolkitError(ValueError):
    """A user's mistake: bad model id, method, option, sparsity or data. Shown without traceback."""


class NumericalError(ToolkitError):
    """A solve failed even after the bounded damping escalation (R12)."""


class RunCancelled(Exception):  # no Error suffix: it is a signal, not an error
    """Raised at a cancellation point when the run's cancel token is set."""


class DistributedError(ToolkitError):
    """A rank of a ``--distributed`` run disagreed, failed, died or timed out; the run is marked failed."""
