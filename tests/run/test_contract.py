"""Contract v2 through the engine, the pipeline and the store with test-only methods: a quantizer that
returns :func:`toolkit.methods.quant_grid.quantize` states, and a block-scope method (a stand-in for
toolkit.engine.block.driver) that removes MLP channels. Sparsity comes from keep-masks, bits and bytes from
the grids and the shapes."""

from __future__ import annotations

import dataclasses
import json
import math
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import toolkit.methods as methods
from toolkit.api import RunConfig, prune_model
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig, EngineResult
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import SublayerPruned
from toolkit.methods.base import MethodSpec, Produces, PruneResult, Scope
from toolkit.methods.magnitude import MagnitudeConfig
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.methods.quant_grid import QuantState, bits_per_weight, dequantize, quantize
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.run.accounting import account, linear_shapes
from toolkit.spec.compression import Compression, QuantSpec, Unit
from toolkit.spec.targets import NM, Structured, Unstructured
from toolkit.store.runs import open_run

INT2 = QuantSpec(bits=2, group_size=32)
QUICK = {"model": "tiny-llama", "nsamples": 2, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2, "device": "cpu"}


def _windows() -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(3))
    return calibration_windows(tokens, CalibSpec("x", 4, 32, 0))


def _rtn(W: torch.Tensor, stats: object, target: object, cfg: object, ctx: object) -> PruneResult:
    """Round to nearest on the run's grid (after magnitude pruning when a target is given)."""
    keep = torch.ones_like(W, dtype=torch.bool) if target is None else keep_mask_from_scores(W.abs(), target, "matrix")
    state = quantize(W * keep, ctx.quant)
    return PruneResult(weight=dequantize(state) * keep, keep_mask=keep, quant=state)


RTN = MethodSpec("test-rtn", _rtn, MagnitudeConfig, frozenset(), targets=(Unstructured, NM),
                 produces=frozenset({Produces.MASK, Produces.QUANT}), summary="test-only round to nearest")


def _weights(model: nn.Module) -> dict[tuple[int, str], torch.Tensor]:
    return {(i, n): get_weight(m).detach().clone()
            for i, layer in enumerate(decoder_layers(model)) for n, m in layer_linears(layer).items()}


def test_quantized_linears_are_written_from_their_state_and_counted_from_masks() -> None:
    model = load_model("tiny-llama").model
    before = linear_shapes(model)
    states: dict[tuple[int, str], QuantState] = {}
    events: list = []
    result = prune_layers(model, _windows(), RTN, Compression(quant=INT2), None, cfg=EngineConfig(batch_size=2),
                          emit=events.append,
                          on_quant=lambda layer, name, state: states.__setitem__((layer, name), state))
    weights = _weights(model)
    assert set(states) == set(weights)
    for key, state in states.items():
        assert torch.equal(weights[key], dequantize(state)), key
    exact_zeros = sum(int((w == 0).sum()) for w in weights.values()) / sum(w.numel() for w in weights.values())
    assert exact_zeros > 0.2  # the INT2 grid alone makes many exact zeros ...
    assert result.achieved_sparsity == 0.0  # ... which are not pruning
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    assert all(e.sparsity == 0.0 and e.bits == bits_per_weight(INT2, e.shape[1]) for e in pruned)
    assert all(0 < e.quant_rel_error < 1 and e.params_before == e.params_after == math.prod(e.shape) for e in pruned)
    accounting = account(model, before, result.kept, result.quant)
    assert accounting.sparsity == 0.0 and accounting.params_after == accounting.params_before
    assert accounting.nonzeros_kept == accounting.params_before
    expected = sum(bits_per_weight(INT2, c) * r * c for r, c in before.values()) / accounting.params_after
    assert accounting.bits_per_weight == pytest.approx(expected) and 2.5 < expected < 2.6  # 2 + 18/32 bits
    dense = sum(p.numel() * 4 for p in model.parameters())
    assert accounting.estimated_bytes < dense


def test_pruned_and_quantized_sparsity_comes_from_the_mask() -> None:
    model = load_model("tiny-llama").model
    events: list = []
    result = prune_layers(model, _windows(), RTN, Compression(sparsity=NM(2, 4), quant=INT2), None,
                          cfg=EngineConfig(batch_size=2), emit=events.append)
    assert result.achieved_sparsity == pytest.approx(0.5)
    weights = _weights(model)
    assert sum(int((w == 0).sum()) for w in weights.values()) > 0.55 * sum(w.numel() for w in weights.values())


def test_cancel_after_quantized_writes_restores_the_model() -> None:
    model = load_model("tiny-llama").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen: list = []
    with pytest.raises(RunCancelled):
        prune_layers(model, _windows(), RTN, Compression(quant=INT2), None, cfg=EngineConfig(batch_size=2),
                     emit=seen.append, cancelled=lambda: sum(isinstance(e, SublayerPruned) for e in seen) >= 9)
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())


def test_a_quantizer_that_returns_no_state_is_refused() -> None:
    def forgetful(*args: object) -> PruneResult:
        return dataclasses.replace(_rtn(*args), quant=None)

    with pytest.raises(ToolkitError, match="no quantization state"):
        prune_layers(load_model("tiny-llama").model, _windows(), dataclasses.replace(RTN, fn=forgetful),
                     Compression(quant=INT2), None, cfg=EngineConfig(batch_size=2), emit=lambda e: None)


def test_quantizing_run_records_states_and_accounting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(methods.METHODS, RTN.name, RTN)
    result = prune_model(RunConfig(method="test-rtn", sparsity=None, quant="int2:g32", out_dir=str(tmp_path),
                                   save_model=True, **QUICK))
    assert result["schema"] == 2 and result["compression"]["kind"] == "quant" and result["sparsity"] is None
    assert result["quant"] == "int2:g32" and result["achieved_sparsity"] == 0.0
    accounting = result["accounting"]
    assert 2.5 < accounting["bits_per_weight"] < 2.6 and accounting["checkpoint_bytes"] > 0
    assert result["checkpoint"]["format"] == "pack-quantized"
    assert accounting["estimated_bytes"] < accounting["checkpoint_bytes"]  # it stores float32 scales
    assert all(row["bits"] == pytest.approx(bits_per_weight(INT2, row["shape"][1])) for row in result["layers"])
    record = open_run(result["run_dir"])
    config = json.loads((record.path / "config.json").read_text())
    assert config["schema"] == 2 and config["compression"]["quant"] == {"label": "int2:g32", "bits": 2,
                                                                       "group_size": 32, "symmetric": False}
    assert len(record.quant_names()) == 14 and len(record.mask_names()) == 14
    stored = record.load_quant(1, "mlp.down_proj")
    assert stored.codes.dtype == np.uint8 and stored.codes.shape == (64, 128) and stored.codes.max() <= 3
    assert stored.scales.shape == (64, 4) and (stored.bits, stored.group_size, stored.symmetric) == (2, 32, False)
    saved = load_model(str(record.path / "model")).model  # dequantized at load
    codes, zeros, scales = (torch.from_numpy(a) for a in (stored.codes, stored.zeros, stored.scales))
    expected = (codes.float() - zeros.repeat_interleave(32, 1)) * scales.repeat_interleave(32, 1)
    torch.testing.assert_close(saved.model.layers[1].mlp.down_proj.weight, expected)
    finished = record.events()[-1]
    assert finished.kind == "RunFinished" and finished.bits_per_weight == pytest.approx(accounting["bits_per_weight"])
    assert finished.checkpoint_bytes == accounting["checkpoint_bytes"]


# -- block scope: a stand-in for toolkit.engine.block.driver --------------------------------------------------
def _shrink_mlp(parent: nn.Module, keep: torch.Tensor, writeback: WriteBack) -> None:
    """Keep the intermediate channels ``keep`` of a Llama MLP (gate/up rows, down columns)."""
    for attr in ("gate_proj", "up_proj"):
        old = getattr(parent, attr)
        new = nn.Linear(old.in_features, len(keep), bias=False)
        new.weight.data.copy_(old.weight.data[keep])
        writeback.replace(parent, attr, new)
    old = parent.down_proj
    new = nn.Linear(len(keep), old.out_features, bias=False)
    new.weight.data.copy_(old.weight.data[:, keep])
    writeback.replace(parent, "down_proj", new)
    writeback.set_attr(parent, "intermediate_size", len(keep))


def _fake_block_engine(fail: bool = False) -> types.ModuleType:
    module = types.ModuleType("toolkit.engine.block.driver")

    def prune_blocks(model, windows, spec, compression, method_cfg, *, cfg, emit, cancelled, writeback,
                     on_structure):
        for index, layer in enumerate(decoder_layers(model)):
            width = layer.mlp.gate_proj.out_features
            keep = torch.arange(width - int(width * compression.sparsity.sparsity))
            _shrink_mlp(layer.mlp, keep, writeback)
            on_structure({"layer": index, "unit": compression.unit.value, "kept": keep.tolist(),
                          "shapes": {"mlp.down_proj": list(layer.mlp.down_proj.weight.shape)}})
            if fail:
                raise RunCancelled("cancelled")
        return EngineResult()

    def check_block_budget(model, spec, compression, method_cfg):  # the pipeline's pre-check: this fake allows all
        return None

    module.prune_blocks = prune_blocks
    module.check_block_budget = check_block_budget
    return module



def _use_block_engine(monkeypatch: pytest.MonkeyPatch, fake: types.ModuleType) -> None:
    """Route block-scope runs to ``fake`` where the engine and the pipeline call the block driver."""
    monkeypatch.setattr("toolkit.engine.prune.prune_blocks", fake.prune_blocks)
    monkeypatch.setattr("toolkit.run.pipeline.check_block_budget", fake.check_block_budget)


BLOCK = MethodSpec("test-block", lambda *a: None, MagnitudeConfig, frozenset(), targets=(Structured,),
                   scope=Scope.BLOCK, produces=frozenset({Produces.STRUCTURE}), units=(Unit.CHANNELS,),
                   summary="test-only channel removal")


def test_block_scope_failure_restores_shapes_and_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_block_engine(monkeypatch, _fake_block_engine(fail=True))
    model = load_model("tiny-llama").model
    mlp = decoder_layers(model)[0].mlp
    modules = (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RunCancelled):
        prune_layers(model, _windows(), BLOCK, Compression(sparsity=Structured(0.25), unit=Unit.CHANNELS), None,
                     cfg=EngineConfig(), emit=lambda e: None)
    assert (mlp.gate_proj, mlp.up_proj, mlp.down_proj) == modules and mlp.intermediate_size == 128
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())


def test_block_scope_run_records_structure_and_counts_removed_weights(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _use_block_engine(monkeypatch, _fake_block_engine())
    monkeypatch.setitem(methods.METHODS, BLOCK.name, BLOCK)
    result = prune_model(RunConfig(method="test-block", sparsity="structured:25%", unit="channels",
                                   out_dir=str(tmp_path), **QUICK))
    accounting = result["accounting"]
    mlp_before, mlp_after = 3 * 64 * 128, 3 * 64 * 96
    assert accounting["params_before"] - accounting["params_after"] == 2 * (mlp_before - mlp_after)
    assert accounting["nonzeros_kept"] == accounting["params_after"]
    assert result["achieved_sparsity"] == pytest.approx(1 - accounting["params_after"] / accounting["params_before"])
    assert math.isfinite(result["ppl"]["wiki"])  # the shrunk model still runs
    changes = open_run(result["run_dir"]).structure()
    assert [c["layer"] for c in changes] == [0, 1] and changes[0]["shapes"]["mlp.down_proj"] == [64, 96]
    assert result["compression"]["unit"] == "channels" and result["unit"] == "channels"


@pytest.mark.parametrize(("fields", "message"), [
    ({"method": "wanda", "quant": "int4"}, "wanda only prunes"),
    ({"method": "magnitude", "sparsity": "structured:30%", "unit": "heads"}, "magnitude cannot remove --unit heads"),
    ({"method": "wanda", "unit": "heads"}, "needs a structured ratio"),
    ({"method": "test-rtn", "sparsity": "structured:30%", "quant": "int4"}, "test-rtn supports"),
    ({"method": "test-rtn", "sparsity": None}, "nothing to do"),
    ({"method": "wanda", "sparsity": None, "quant": "int4"}, "wanda only prunes"),
    ({"method": "wanda", "sparsity": None}, "nothing to do"),
])
def test_a_spec_the_method_cannot_meet_is_refused_before_loading(fields: dict, message: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(methods.METHODS, RTN.name, RTN)
    with pytest.raises(ToolkitError, match=message) as caught:
        RunConfig(model="no-such-model", **fields)
    assert "\n" not in str(caught.value)
