"""The process group of a ``--distributed`` run: launch checks, backend, timeout, config agreement.

``torchrun --nproc-per-node N -m toolkit prune … --distributed`` starts N copies of the CLI; each
reads torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), joins one process group (``gloo`` on CPUs, ``nccl`` on GPUs, each rank on
``cuda:LOCAL_RANK``) whose collectives and point-to-point receives give up after
``dist_timeout`` seconds, and checks at once that every rank was given the same run: an
all-gather of each rank's config digest (sha256 of its JSON). Rank 0 then runs the pipeline and
the other ranks serve layers (:mod:`toolkit.engine.ranks`).

Under torchrun a rank that dies makes the launcher stop the others with SIGTERM: inside a
distributed run that signal raises :class:`DistributedError`, so rank 0 restores its model and
marks the run failed instead of cancelled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from toolkit.errors import DistributedError, ToolkitError

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
LAUNCH_HINT = "launch it with `torchrun --nproc-per-node N -m toolkit prune … --distributed`"


@dataclass(frozen=True)
class Group:
    """A process's place in the run: its rank, how many ranks, the backend and its device."""

    rank: int
    world_size: int
    backend: str
    device: torch.device

    @property
    def label(self) -> str:
        """The devices that ran, e.g. ``2 ranks × cpu (gloo)``."""
        return f"{self.world_size} ranks × {self.device.type} ({self.backend})"


def check_launch(env: Mapping[str, str] = os.environ) -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; a :class:`ToolkitError` when it is missing."""
    missing = [name for name in LAUNCH_ENV if name not in env]
    if missing:
        raise ToolkitError(f"--distributed needs torchrun's environment ({', '.join(missing)} not set); {LAUNCH_HINT}")
    try:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    except ValueError:
        raise ToolkitError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers; {LAUNCH_HINT}") from None
    if world < 2 or not 0 <= rank < world:
        raise ToolkitError(f"--distributed needs at least 2 ranks (WORLD_SIZE={world}, RANK={rank}); {LAUNCH_HINT}")
    return rank, world, local


def config_digest(config: Mapping[str, Any]) -> str:
    """sha256 of the config's canonical JSON (sorted keys): equal digests, equal runs."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def check_agreement(config: Mapping[str, Any], world_size: int) -> None:
    """All-gather every rank's config digest; a :class:`DistributedError` naming the fields that differ."""
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, (config_digest(config), dict(config)))
    reference_digest, reference = gathered[0]
    differing = sorted({key for digest, other in gathered if digest != reference_digest
                        for key in set(reference) | set(other) if reference.get(key) != other.get(key)})
    if differing:
        ranks = [rank for rank, (digest, _) in enumerate(gathered) if digest != reference_digest]
        raise DistributedError(f"ranks {ranks} were given a different run than rank 0 (differing: "
                               f"{', '.join(differing)}); launch every rank with the same command")


def _launcher_stopped(signum: int, frame: object) -> None:
    raise DistributedError("stopped by the launcher (SIGTERM): another rank failed or the job was stopped")


@contextlib.contextmanager
def process_group(config: Any, device: torch.device) -> Iterator[Group]:
    """Join the run's process group (``config`` is a RunConfig), check the ranks agree, leave it on exit.

    ``device`` is the run's resolved device; a CUDA run puts each rank on ``cuda:LOCAL_RANK``.
    """
    rank, world, local = check_launch()
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=config.dist_timeout))
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _launcher_stopped)
    try:
        check_agreement(config.to_dict(), world)
        yield Group(rank=rank, world_size=world, backend=backend, device=device)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        dist.destroy_process_group()
