"""What a compression bought (toolkit/run/bought.py), on tiny-llama: pruned-dense, saved, packed INT4, shrunk.

tiny-llama has 2 decoder layers of 7 linears (73,728 linear weights) in float32. Tests never depend on
speed: the decode speed is checked to be measured (positive, finite, on the run's device), not fast.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError
from toolkit.evaluation import speed as speed_module
from toolkit.evaluation.speed import decode_tokens_per_s
from toolkit.events import EvalProgress, Event, RunFinished
from toolkit.models.load import load_model
from toolkit.run import bought as bought_module
from toolkit.run.accounting import Accounting, dense_bytes, folder_bytes, weights_bytes
from toolkit.run.bought import DensePrice, bought, dense_price, stored_as
from toolkit.spec.compression import parse_quant, parse_unit
from toolkit.spec.targets import Structured

LINEAR_WEIGHTS = 73_728  # tiny-llama: 2 layers × (4 · 64·64 + 3 · 64·128)


def run(tmp_path: Path, **fields: Any) -> tuple[dict[str, Any], list[Event]]:
    events: list[Event] = []
    config = RunConfig(**{"model": "tiny-llama", "nsamples": 2, "seqlen": 32, "eval_data": None, "device": "cpu",
                          "threads": 1, "out_dir": str(tmp_path / "runs"), **fields})
    return prune_model(config, on_event=events.append), events


def carried(result: dict[str, Any], events: list[Event]) -> dict[str, Any]:
    """The bought record, checked to be the same in result.json, the returned result and RunFinished."""
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    stored = json.loads(Path(result["run_dir"], "result.json").read_text())["bought"]
    assert finished.bought == result["bought"] == stored
    return stored


@pytest.fixture(scope="module")
def tiny_bytes() -> int:
    return dense_bytes(load_model("tiny-llama").model)


def test_a_pruned_model_stored_dense_is_not_smaller(tmp_path: Path, tiny_bytes: int) -> None:
    record = carried(*run(tmp_path, method="wanda"))
    assert record["params_before"] == record["params_after"] == LINEAR_WEIGHTS
    assert record["kept_weights"] == LINEAR_WEIGHTS // 2  # Wanda keeps half of every row
    assert record["stored_as"] == "dense" and not record["smaller_as_saved"] and record["speed"] is None
    assert record["bytes_dense"] == record["bytes_stored"] == tiny_bytes and not record["bytes_measured"]


def test_a_saved_checkpoint_is_measured_on_disk(tmp_path: Path, tiny_bytes: int) -> None:
    result, events = run(tmp_path, method="wanda", save_model=True)
    record = carried(result, events)
    folder = Path(result["run_dir"]) / "model"
    assert record["bytes_measured"] and record["bytes_stored"] == weights_bytes(folder) < folder_bytes(folder)
    # the weights alone, like bytes_dense (config and tokenizer left out on both sides): zeros take as many bytes
    assert record["bytes_stored"] == pytest.approx(tiny_bytes, rel=0.01) and not record["smaller_as_saved"]


def test_a_quantized_model_is_stored_packed(tmp_path: Path, tiny_bytes: int) -> None:
    result, events = run(tmp_path, method="rtn", sparsity=None, quant=parse_quant("int4:g0"))
    record = carried(result, events)
    assert record["stored_as"] == "pack-quantized" and record["smaller_as_saved"]
    assert record["kept_weights"] == LINEAR_WEIGHTS and record["speed"] is None
    assert record["bytes_stored"] == result["accounting"]["estimated_bytes"] < tiny_bytes
    # the linears' 4 bits plus one scale and zero point per row replace 32 bits; the rest stays float32
    linear_bytes = LINEAR_WEIGHTS * 4
    assert tiny_bytes - record["bytes_stored"] == pytest.approx(linear_bytes * (1 - 4 / 32), rel=0.02)


def test_a_structured_run_is_shrunk_and_its_decode_speed_measured_dense_and_shrunk(tmp_path: Path,
                                                                                    tiny_bytes: int) -> None:
    result, events = run(tmp_path, method="numerical", sparsity=Structured(0.5), unit=parse_unit("heads+channels"))
    record = carried(result, events)
    assert record["stored_as"] == "shrunk" and record["params_after"] < record["params_before"] == LINEAR_WEIGHTS
    assert record["kept_weights"] == record["params_after"] and record["smaller_as_saved"]
    assert record["bytes_stored"] == result["accounting"]["estimated_bytes"] < tiny_bytes
    speed = record["speed"]
    assert speed["device"] == "cpu" and speed["batch"] == 1 and speed["new_tokens"] == speed_module.NEW_TOKENS
    assert all(math.isfinite(speed[k]) and speed[k] > 0 for k in ("dense_tokens_per_s", "tokens_per_s"))
    assert [t["batch"] for t in speed["by_batch"]] == [t["batch"] for t in speed["dense_by_batch"]] == [1, 8]
    assert speed["tokens_per_s"] == speed["by_batch"][0]["tokens_per_s"] and speed["threads"] == 1
    # each timing is a named stage of the run (the status line says so), opened and closed, dense then pruned
    ticks = [(e.phase, e.done, e.total) for e in events if isinstance(e, EvalProgress) and e.what == "speed"]
    assert ticks == [("dense", 0, 1), ("dense", 1, 1), ("pruned", 0, 1), ("pruned", 1, 1)]


def test_the_dense_speed_is_measured_only_when_the_model_will_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model("tiny-llama").model
    monkeypatch.setattr(bought_module, "compare", lambda *a, **k: pytest.fail("measured"))
    price = dense_price(model, torch.device("cpu"), torch.arange(40), shrinks=False)
    assert price == DensePrice(dense_bytes(model))
    monkeypatch.setattr(bought_module, "compare", lambda models, prompt, device: [
        [speed_module.Throughput(1, len(prompt), 32, 3, 1.0, 1.0, float(len(prompt)))]])
    price = dense_price(model, torch.device("cpu"), torch.arange(40).reshape(2, 20), shrinks=True)
    assert price.prompt == list(range(speed_module.PROMPT_TOKENS)) and price.tokens_per_s == speed_module.PROMPT_TOKENS


@pytest.mark.parametrize(("after", "quantized", "kind"), [
    (100, False, "dense"), (100, True, "pack-quantized"), (60, False, "shrunk"), (60, True, "shrunk+pack-quantized")])
def test_stored_as(after: int, quantized: bool, kind: str) -> None:
    accounting = Accounting(params_before=100, params_after=after, nonzeros_kept=50, sparsity=0.5, bits_per_weight=16,
                            estimated_bytes=1000)
    assert stored_as(accounting, quantized) == kind
    record = bought(DensePrice(2000), torch.nn.Linear(2, 2), torch.device("cpu"), accounting, None,
                    quantized=quantized)
    assert record["smaller_as_saved"] is (kind != "dense") and record["bytes_stored"] == 1000


def test_a_quantized_run_saved_dense_is_stored_dense(tmp_path: Path) -> None:
    accounting = Accounting(params_before=100, params_after=100, nonzeros_kept=100, sparsity=0.0, bits_per_weight=4,
                            estimated_bytes=500)
    (tmp_path / "model.safetensors").write_bytes(b"0" * 2100)
    (tmp_path / "tokenizer.json").write_bytes(b"0" * 5000)  # not a weight: left out as from bytes_dense
    record = bought(DensePrice(2000), torch.nn.Linear(2, 2), torch.device("cpu"), accounting,
                    {"format": "dense", "bytes": 7100, "folder": str(tmp_path)}, quantized=True)
    assert record["stored_as"] == "dense" and record["bytes_stored"] == 2100 and record["bytes_measured"]
    assert not record["smaller_as_saved"]


def test_decode_speed_leaves_the_model_as_it_was() -> None:
    model = load_model("tiny-llama").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rate = decode_tokens_per_s(model, [1, 2, 3, 4], "cpu", new_tokens=4, repeats=2)
    assert math.isfinite(rate) and rate > 0 and not model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ToolkitError, match="empty"):
        decode_tokens_per_s(model, [], "cpu")


def test_the_cli_summary_says_what_it_bought() -> None:
    from toolkit.cli.view import bought_line

    dense = bought(DensePrice(2 * 2**20), torch.nn.Linear(2, 2), torch.device("cpu"),
                   Accounting(params_before=100, params_after=100, nonzeros_kept=50, sparsity=0.5, bits_per_weight=32,
                              estimated_bytes=2 * 2**20), None, quantized=False)
    assert bought_line(dense) == ("bought: 50 of 100 weights kept  stored dense 2.00 MiB (computed) vs dense 2.00 MiB: "
                                  "not smaller or faster as saved (pruned weights are stored as zeros in a dense "
                                  "checkpoint and multiplied like any other)")
    shrunk = {**dense, "stored_as": "shrunk", "bytes_stored": 2**20, "smaller_as_saved": True,
              "speed": {"device": "cpu", "batch": 1, "new_tokens": 32, "dense_tokens_per_s": 40.0,
                        "tokens_per_s": 52.5}}
    assert bought_line(shrunk).endswith("stored shrunk 1.00 MiB (computed) vs dense 2.00 MiB  decode 40.0 → 52.5 "
                                        "tokens/s (cpu, batch 1, 32 new tokens)")
    by_batch = [{"batch": 8, "prefill_tokens_per_s": 300.0, "decode_tokens_per_s": 90.0}]
    shrunk["speed"] = {**shrunk["speed"], "dense_by_batch": by_batch,
                       "by_batch": [{**by_batch[0], "prefill_tokens_per_s": 400.0, "decode_tokens_per_s": 120.0}]}
    assert bought_line(shrunk).endswith("32 new tokens)  batch 8: prefill 300.0 → 400.0, decode 90.0 → 120.0 tokens/s")


def test_a_model_the_device_cannot_hold_whole_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(*args: Any, **kwargs: Any) -> float:
        raise torch.OutOfMemoryError("CUDA out of memory")

    model = load_model("tiny-llama").model
    monkeypatch.setattr(bought_module, "compare", out_of_memory)
    assert dense_price(model, torch.device("cpu"), torch.arange(20), shrinks=True) == DensePrice(dense_bytes(model))
