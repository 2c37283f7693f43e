"""The engine at real scale, checked on tiny models: the model's own dtype kept, one layer upcast at a time,
a journal that spills to disk, the per-phase timer, the sampled dense pass, out-of-memory reported per layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.engine.test_prune import _windows
from tests.helpers.failing import exploding
from toolkit.engine.phases import PHASES, PhaseTimer, phase_totals
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.runtime.devices import forward_dtype
from toolkit.runtime.placement import placed, storage_dtype
from toolkit.runtime.precision import layer_precision
from toolkit.spec.targets import Unstructured


def _prune(model: nn.Module, method: str = "wanda", **engine: object):
    spec = get_method(method)
    events: list = []
    result = prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(),
                          cfg=EngineConfig(batch_size=2, device="cpu", **engine), emit=events.append)
    return result, events


def test_layer_precision_table() -> None:
    bf16, fp32, fp16 = torch.bfloat16, torch.float32, torch.float16
    assert (layer_precision(bf16, bf16).layer_dtype, layer_precision(bf16, bf16).autocast) == (bf16, None)
    assert (layer_precision(bf16, None).layer_dtype, layer_precision(bf16, None).autocast) == (fp32, None)
    assert (layer_precision(fp32, bf16).layer_dtype, layer_precision(fp32, bf16).autocast) == (fp32, bf16)
    assert (layer_precision(fp16, bf16).layer_dtype, layer_precision(fp16, None).layer_dtype) == (fp32, fp32)
    assert layer_precision(bf16, bf16).forward == "bf16" and layer_precision(bf16, None).forward == "fp32"


def test_forward_auto_is_fp32_on_a_cpu() -> None:
    warnings: list = []
    assert forward_dtype("auto", torch.device("cpu"), warnings.append) is None
    assert forward_dtype("fp32", torch.device("cpu"), warnings.append) is None
    assert not warnings


def test_placed_restores_each_tensors_device_and_dtype() -> None:
    layer = nn.Linear(4, 3).to(torch.bfloat16)
    layer.register_buffer("table", torch.arange(3, dtype=torch.float32))
    with placed(layer, torch.device("cpu"), torch.float32):
        assert layer.weight.dtype == torch.float32 and layer.table.dtype == torch.float32
        layer.weight.data.mul_(2)  # a write on the device copy goes home in the storage dtype
    assert layer.weight.dtype == torch.bfloat16 and layer.table.dtype == torch.float32
    assert storage_dtype(layer) == torch.bfloat16


def test_bf16_model_stays_bf16_and_layers_run_in_float32_on_a_cpu() -> None:
    model = load_model("tiny-llama", dtype="bfloat16").model
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32  # tables are not cast with the weights
    result, _ = _prune(model)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert result.precision == {"storage": "bfloat16", "forward": "fp32", "layer_on_device": "float32",
                                "statistics": "float32", "solve": "float32"}
    for layer in decoder_layers(model):
        for linear in layer_linears(layer).values():
            assert abs(float((get_weight(linear) == 0).float().mean()) - 0.5) < 0.01


def test_journal_spills_beyond_its_budget_and_restores_exactly() -> None:
    model = load_model("tiny-llama", dtype="bfloat16").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    journal = WriteBack(budget_bytes=0)  # every backup into a file
    spec = get_method("sparsegpt")
    prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(),
                 cfg=EngineConfig(batch_size=2, device="cpu"), emit=lambda e: None, writeback=journal)
    assert journal._dirs and any(journal._dirs[0].iterdir())
    folder = journal._dirs[0]
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    journal.restore()
    assert all(torch.equal(v, before[k]) and v.dtype == before[k].dtype for k, v in model.state_dict().items())
    assert not folder.exists()


def test_failed_bf16_run_with_a_spilling_journal_is_restored_and_leaves_no_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    model = load_model("tiny-llama", dtype="bfloat16").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ToolkitError, match="boom"):
        prune_layers(model, _windows(), exploding(1), Unstructured(0.5), get_method("magnitude").make_config(),
                     cfg=EngineConfig(batch_size=2, device="cpu", journal_budget_mb=0), emit=lambda e: None)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not list(tmp_path.glob("prunelab-journal-*"))


def test_phases_are_recorded_per_layer_and_never_count_time_twice() -> None:
    model = load_model("tiny-llama").model
    result, events = _prune(model, "sparsegpt")
    layers = [r["layer"] for r in result.phases]
    assert layers == [-1, 0, 1]  # the capture, then each decoder layer
    assert set(result.phases[0]) == {"layer", "capture"}
    for record in result.phases[1:]:
        assert {"copies", "statistics", "solve", "propagation"} <= set(record) <= {"layer", *PHASES}
        assert all(record[p] >= 0 for p in record if p != "layer")
    done = {e.layer: e.seconds for e in events if isinstance(e, LayerDone)}
    for record in result.phases[1:]:  # the phases inside prune_layer add up to at most its wall time
        inside = sum(v for p, v in record.items() if p not in ("layer", "copies"))
        assert inside <= done[record["layer"]] + 1e-3
    assert sum(phase_totals(result.phases).values()) <= result.seconds + 1e-3


def test_nested_sections_pause_the_outer_one() -> None:
    timer = PhaseTimer()
    with timer.section("statistics"):
        with timer.section("solve"):
            pass
        with timer.section("solve"):
            pass
    record = timer.layer_done(3)
    assert record["layer"] == 3 and set(record) == {"layer", "statistics", "solve"}
    assert timer.layer_done(4) == {"layer": 4}


def test_wanda_keeps_dense_outputs_only_for_the_error_sample() -> None:
    """Wanda's statistics pass stops at the last group's input past the error windows: same weights as a run
    that keeps every dense output (propagate=pruned), and the output error is measured on the sample."""
    sampled, full = load_model("tiny-llama").model, load_model("tiny-llama").model
    _prune(sampled, "wanda", error_windows=1)
    _prune(full, "wanda", error_windows=4)  # 4 windows: every batch is kept
    for a, b in zip(sampled.parameters(), full.parameters(), strict=True):
        assert torch.equal(a, b)


def _out_of_memory() -> BaseException:
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has 80 GiB")


def test_out_of_memory_names_the_layer_and_the_memory_and_restores() -> None:
    model = load_model("tiny-llama").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ToolkitError, match=r"out of memory in layer 1 on cpu \(tried to allocate 20\.00 GiB\)"):
        prune_layers(model, _windows(), exploding(1, _out_of_memory), Unstructured(0.5),
                     get_method("magnitude").make_config(), cfg=EngineConfig(batch_size=2, device="cpu"),
                     emit=lambda e: None)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_devices_naming_a_missing_gpu_are_refused_before_the_run_is_recorded(tmp_path) -> None:
    from toolkit.api import RunConfig, prune_model

    config = RunConfig(model="tiny-llama", devices="cpu,cuda:7", propagate="dense", eval_data=None, nsamples=2,
                       seqlen=32, out_dir=str(tmp_path / "runs"))
    with pytest.raises(ToolkitError, match=r"--devices cpu,cuda:7: 'cuda:7' (was asked for|does not exist)"):
        prune_model(config)
    assert not list((tmp_path / "runs").glob("*"))
