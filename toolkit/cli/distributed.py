"""``python -m toolkit prune … --distributed`` under torchrun: rank 0 runs the pipeline, the others serve layers.

torchrun starts the same command on every rank, so every rank checks the same input the same way
before it joins the process group, and an input error is found on all of them at once. Rank 0
says it (one ``error:`` line); the other ranks say nothing and end with the same exit code
(:func:`speaks`, :func:`linger_quietly`). torchrun itself always adds its own report of the ranks
that exited non-zero (``ChildFailedError``, with its launcher traceback): it prints that for any
failed job, whatever the ranks print.

A quiet rank does not exit at once: torchrun stops the whole job as soon as one rank exits
non-zero, and a quiet rank that exited first could have rank 0 stopped before it printed its line.
It waits (at most :data:`LINGER_SECONDS`) for the launcher to stop it once rank 0 has exited; if
nothing stops it, its error was its own (a file only this node lacks) and it prints it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from toolkit.errors import DistributedError

if TYPE_CHECKING:
    from toolkit.run.config import RunConfig

LINGER_SECONDS = 10.0  # a quiet rank's wait for the launcher to stop it after rank 0 exited (it polls every 0.1 s)


def launch_rank(env: Mapping[str, str] = os.environ) -> int | None:
    """The rank torchrun gave this process (``RANK``), or None outside a launch (or an unreadable RANK)."""
    try:
        return int(env["RANK"])
    except (KeyError, ValueError):
        return None


def speaks(distributed: bool, exc: BaseException, env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process prints ``exc``: True except on a rank other than 0 of a ``--distributed`` launch.

    There, an error that is not a :class:`DistributedError` is an input error every rank found the
    same way, which rank 0 reports; a DistributedError (a rank died, timed out, disagreed) is this
    rank's own and is printed.
    """
    rank = launch_rank(env)
    return not distributed or rank is None or rank == 0 or isinstance(exc, DistributedError)


class _Stopped(Exception):
    """The launcher's SIGTERM while a quiet rank waits."""


def _stopped(signum: int, frame: object) -> None:
    raise _Stopped


def linger_quietly(message: str, seconds: float | None = None) -> None:
    """A quiet rank's exit: wait until the launcher stops it (rank 0 said ``message``), else print it.

    Returns when torchrun sends SIGTERM (after rank 0 exited) or after ``seconds`` (default
    :data:`LINGER_SECONDS`), printing ``error (rank N): message`` only then. Outside the main thread, where no
    signal can be caught, it prints at once.
    """
    if threading.current_thread() is not threading.main_thread():
        print(f"error (rank {launch_rank()}): {message}", file=sys.stderr)
        return
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        time.sleep(LINGER_SECONDS if seconds is None else seconds)
    except (_Stopped, KeyboardInterrupt):
        return  # stopped by the launcher: rank 0's line said it
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"error (rank {launch_rank()}): {message}", file=sys.stderr)


def report_error(exc: BaseException, distributed: bool, message: str | None = None) -> None:
    """Print ``error: <message>`` (default ``str(exc)``) where :func:`speaks`, else linger quietly."""
    text = str(exc) if message is None else message
    if speaks(distributed, exc):
        print(f"error: {text}", file=sys.stderr)
    else:
        linger_quietly(text)


def prune_distributed(config: RunConfig, prune_here: Callable[[], int]) -> int:
    """Join the process group; rank 0 calls ``prune_here`` (the usual run), the others solve layers.

    Returns the exit code: rank 0's, and for the other ranks 0 when rank 0 finished, 1 when it failed
    (after rank 0 had the time to say why: :func:`linger_quietly`).
    Raises :class:`~toolkit.errors.ToolkitError` before anything starts when torchrun's environment is missing.
    """
    from toolkit.engine.process_group import check_launch, process_group

    check_launch()  # before torch.distributed or the model is touched
    if config.threads:  # every rank, not only rank 0 (whose prepare() sets it): same float reductions
        import torch

        torch.set_num_threads(config.threads)
    from toolkit.engine.ranks import FINISHED, serve_layers, stop_workers
    from toolkit.run.pipeline import engine_config
    from toolkit.runtime.devices import resolve_device

    with process_group(config, resolve_device(config.device)) as group:
        if group.rank != 0:
            stop = serve_layers(config, engine_config(config), group.device)
            if stop.reason != FINISHED:
                linger_quietly(f"rank 0 stopped the run: {stop.reason}")
            return 0 if stop.reason == FINISHED else 1
        reason = "rank 0 failed"
        try:
            code = prune_here()
            reason = FINISHED
            return code
        except BaseException as exc:
            reason = f"rank 0 failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            raise
        finally:
            stop_workers(group.world_size, reason)
