"""What each spawned rank of tests/engine/test_distributed.py runs (a module, so ``spawn`` can import it).

Every rank writes ``rank<N>.json`` into ``out`` with its exit code or its error, for the test to read.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from toolkit.api import RunConfig, prune_model


def _environ(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)


def _report(out: str, rank: int, **data: Any) -> None:
    Path(out, f"rank{rank}.json").write_text(json.dumps(data, default=str))


def run_rank(rank: int, world: int, port: int, config: dict[str, Any], out: str) -> None:
    """The CLI's distributed path (minus argparse): rank 0 prunes and records, the others serve layers."""
    from toolkit.cli.distributed import prune_distributed

    _environ(rank, world, port)
    result: dict[str, Any] = {}

    def prune_here() -> int:
        result.update(prune_model(RunConfig(**config)))
        return 0

    try:
        code = prune_distributed(RunConfig(**config), prune_here)
        _report(out, rank, code=code, run_dir=result.get("run_dir"), devices=result.get("devices"))
    except Exception as exc:
        _report(out, rank, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc())


def failing_worker(rank: int, world: int, port: int, config: dict[str, Any], out: str, how: str) -> None:
    """Rank 0 prunes a model it holds with the distributed engine; rank 1 takes its first layer and then
    dies (``how="exit"``) or hangs (``"hang"``). Rank 0 reports the error and whether its model is untouched."""
    from toolkit.data.text import CalibSpec, calibration_windows
    from toolkit.engine.process_group import process_group
    from toolkit.engine.prune import prune_layers
    from toolkit.engine.ranks import LayerJob, _receive
    from toolkit.engine.state import EngineConfig
    from toolkit.methods import get_method
    from toolkit.models.layers import decoder_layers, get_weight, layer_linears
    from toolkit.models.load import load_model

    _environ(rank, world, port)
    run_config = RunConfig(**config)
    model = load_model(run_config.model).model  # before joining: the group's timeout starts with it
    with process_group(run_config, torch.device("cpu")):
        if rank != 0:
            job = _receive(0, "work")
            assert isinstance(job, LayerJob)
            if how == "exit":
                os._exit(1)
            time.sleep(40)  # longer than the test's 20 s timeout
            os._exit(0)
        before = [get_weight(m).clone() for layer in decoder_layers(model) for m in layer_linears(layer).values()]
        tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(2))
        windows = calibration_windows(tokens, CalibSpec("x", 4, 32, 0))
        spec = get_method(run_config.method)
        start = time.perf_counter()
        try:
            prune_layers(model, windows, spec, run_config.sparsity, spec.make_config(), emit=lambda event: None,
                         cfg=EngineConfig(propagate="dense", distributed=True))
            error = ""
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        after = [get_weight(m) for layer in decoder_layers(model) for m in layer_linears(layer).values()]
        untouched = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        _report(out, rank, error=error, untouched=untouched, seconds=time.perf_counter() - start)
        os._exit(0)  # the peer is gone: leaving the group would wait for it
