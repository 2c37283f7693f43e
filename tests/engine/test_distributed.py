"""Layer-parallel pruning on torch.distributed (gloo, 2 CPU ranks): the one-process result, and the bad input."""

from __future__ import annotations

import json
import multiprocessing
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tests.helpers.dist_ranks import failing_worker, run_rank
from toolkit.api import RunConfig, prune_model
from toolkit.cli.main import main
from toolkit.engine.process_group import check_launch, config_digest
from toolkit.errors import ToolkitError

CONFIG = {"model": "tiny-llama", "method": "sparsegpt", "sparsity": "50%", "nsamples": 4, "seqlen": 32,
          "eval_data": None, "propagate": "dense", "save_model": True,
          "threads": 1}  # one thread in every process: identical float reductions, so identical masks


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(target: Callable[..., None], configs: list[dict[str, Any]], out: Path, *extra: Any) -> list[dict]:
    """Run ``target`` as ranks 0..n-1 (spawned processes); returns each rank's report."""
    context = multiprocessing.get_context("spawn")
    port = _free_port()
    ranks = [context.Process(target=target, args=(rank, len(configs), port, config, str(out), *extra))
             for rank, config in enumerate(configs)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=240)
        assert not process.is_alive(), "a rank hung"
    return [json.loads(path.read_text()) if (path := out / f"rank{r}.json").exists() else {}
            for r in range(len(configs))]


def _masks(run_dir: str) -> dict[str, np.ndarray]:
    return {path.name: np.load(path)["bits"] for path in sorted(Path(run_dir, "masks").glob("*.npz"))}


@pytest.mark.slow  # spawns two Python processes (about 40 s on two shared cores)
def test_two_gloo_ranks_give_the_one_process_result(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        single = prune_model(RunConfig(**CONFIG, out_dir=str(tmp_path / "one")))
    finally:
        torch.set_num_threads(threads)  # the run set one thread for this process
    config = {**CONFIG, "distributed": True, "out_dir": str(tmp_path / "two")}
    rank0, rank1 = _spawn(run_rank, [config, config], tmp_path)
    assert rank0.get("code") == 0 and rank1.get("code") == 0, (rank0, rank1)
    assert rank0["devices"] == "2 ranks × cpu (gloo)" and single["devices"] == "cpu"
    assert list(Path(tmp_path / "two").iterdir()) == [Path(rank0["run_dir"])]  # one run record, by rank 0
    one, two = _masks(single["run_dir"]), _masks(rank0["run_dir"])
    assert one.keys() == two.keys() and len(one) == 14
    assert all(np.array_equal(one[name], two[name]) for name in one)
    weights_one = load_file(next(Path(single["run_dir"], "model").glob("*.safetensors")))
    weights_two = load_file(next(Path(rank0["run_dir"], "model").glob("*.safetensors")))
    assert all(np.allclose(weights_one[k], weights_two[k], rtol=1e-5, atol=1e-7) for k in weights_one)
    events = [json.loads(line) for line in Path(rank0["run_dir"], "events.jsonl").read_text().splitlines()]
    pruned = [(e["layer"], e["name"]) for e in events if e["type"] == "SublayerPruned"]
    assert pruned == sorted(pruned, key=lambda key: key[0]) and len(pruned) == 14  # replayed in layer order
    assert events[-1]["type"] == "RunFinished" and events[-1]["devices"] == "2 ranks × cpu (gloo)"


@pytest.mark.slow
def test_ranks_that_disagree_stop_at_start(tmp_path: Path) -> None:
    config = {**CONFIG, "distributed": True, "out_dir": str(tmp_path / "runs")}
    reports = _spawn(run_rank, [config, {**config, "method": "fista", "seed": 1}], tmp_path)
    for report in reports:
        assert "DistributedError" in report["error"] and "differing: method, seed" in report["error"]
    assert not (tmp_path / "runs").exists()  # nothing was recorded


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "hang"])
def test_a_rank_that_dies_fails_the_run_and_leaves_the_model(tmp_path: Path, how: str) -> None:
    config = {**CONFIG, "distributed": True, "dist_timeout": 20.0}
    rank0, _ = _spawn(failing_worker, [config, config], tmp_path, how)
    assert "DistributedError: rank 1 gave no result for layer 1" in rank0["error"], rank0
    assert rank0["untouched"] is True  # layer 0, pruned on rank 0, was restored
    assert rank0["seconds"] < 60


def test_distributed_without_torchrun_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    code = main(["prune", "--model", "tiny-llama", "--method", "sparsegpt", "--propagate", "dense", "--distributed"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --distributed needs torchrun's environment")
    with pytest.raises(ToolkitError, match="at least 2 ranks"):
        check_launch({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "x", "MASTER_PORT": "1"})


def test_distributed_needs_dense_inputs_and_linear_scope() -> None:
    with pytest.raises(ToolkitError, match="needs --propagate dense"):
        RunConfig(model="tiny-llama", method="sparsegpt", propagate="pruned", distributed=True)
    with pytest.raises(ToolkitError, match="exclude each other"):
        RunConfig(model="tiny-llama", method="sparsegpt", propagate="dense", distributed=True, devices="cpu,cpu")
    with pytest.raises(ToolkitError, match="dist-timeout"):
        RunConfig(model="tiny-llama", method="sparsegpt", propagate="dense", distributed=True, dist_timeout=0)


def test_config_digest_is_order_free_and_sees_every_field() -> None:
    assert config_digest({"a": 1, "b": 2}) == config_digest({"b": 2, "a": 1})
    assert config_digest({"a": 1}) != config_digest({"a": 2})
