"""What a failed or cancelled run left, in words the CLI prints, and the error it is raised as.

A run's failure after its record exists is raised so that the surfaces tell a user's input
(:class:`~toolkit.errors.ToolkitError`, CLI exit 2) from the machine or a library failing
(:class:`~toolkit.errors.MachineFailure`, CLI exit 1; docs/cli.md); a cancel's message says
whether the compression was kept and where the run record is.
"""

from __future__ import annotations

from pathlib import Path

import torch

from toolkit.errors import MachineFailure, RunCancelled, ToolkitError


def failure_message(exc: BaseException, device: torch.device) -> str:
    """One line saying what failed (the run record's ``error``), with what to do where there is something."""
    if isinstance(exc, torch.OutOfMemoryError):
        return (f"out of memory on {device}: lower --nsamples, --seqlen or --set batch size, "
                "or use --device cpu")
    if isinstance(exc, RunCancelled | KeyboardInterrupt):
        return "cancelled"
    if isinstance(exc, OSError):
        where = f" writing {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}: free disk space, fix the permissions or give another --out"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if isinstance(exc, ToolkitError) else f"{type(exc).__name__}: {text}"


def failure_error(exc: BaseException, message: str) -> ToolkitError:
    """The error a recorded run's failure is raised as: a user's input stays a ToolkitError, the rest MachineFailure."""
    user = isinstance(exc, ToolkitError) and not isinstance(exc, MachineFailure)
    return ToolkitError(message) if user else MachineFailure(message)


def stopped_message(stage: str, run_dir: Path) -> str:
    """What a cancel before the compression finished left: a run record marked cancelled, no compressed model."""
    return (f"stopped during the {stage}, before the compression finished: no compressed model was kept and "
            f"the source model was not changed (run record {run_dir})")


def kept_message(run_dir: Path) -> str:
    """What a run record holds of a finished compression, e.g. "the masks and quantization states"."""
    found = [what for what, held in (("masks", any((run_dir / "masks").glob("*.npz"))), ("quantization states", any(
        (run_dir / "quant").glob("*.npz"))), ("structure changes", (run_dir / "structure.json").is_file())) if held]
    return "the " + " and ".join(found) if found else "the run record"
