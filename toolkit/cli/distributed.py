"""``python -m toolkit prune … --distributed`` under torchrun: rank 0 runs the pipeline, the others serve layers."""

from __future__ import annotations

import logging
from collections.abc import Callable

from toolkit.run.config import RunConfig

log = logging.getLogger(__name__)


def prune_distributed(config: RunConfig, prune_here: Callable[[], int]) -> int:
    """Join the process group; rank 0 calls ``prune_here`` (the usual run), the others solve layers.

    Returns the exit code: rank 0's, and for the other ranks 0 when rank 0 finished, 1 when it failed.
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
                log.warning("rank %d: rank 0 stopped the run: %s", group.rank, stop.reason)
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
