"""A run given ``--quant int4`` without a group fits the group to the model before anything is recorded.

The model is a 2-layer Llama with 192-wide hidden and 384-wide MLP inputs (as SmolLM2-135M's 576 and
1536, 128 does not divide the hidden width; 64 divides both).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError
from toolkit.events import Event, RunWarning
from toolkit.models.load import ByteCodec
from toolkit.models.save import save_checkpoint
from toolkit.spec.compression import parse_quant
from toolkit.store.runs import find_finished, open_run


def wide_llama(folder: Path, layers: int = 2) -> str:
    """A random Llama checkpoint with 192-wide hidden and 384-wide MLP inputs; returns its folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=ByteCodec.vocab_size, hidden_size=192, intermediate_size=384,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256)
    return str(save_checkpoint(LlamaForCausalLM(config).eval(), ByteCodec(), folder))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return wide_llama(tmp_path_factory.mktemp("wide") / "llama")


def _config(model: str, out: Path, quant: str, save_model: bool = False) -> RunConfig:
    return RunConfig(model=model, method="rtn", sparsity=None, quant=parse_quant(quant), out_dir=str(out), nsamples=2,
                     seqlen=32, eval_data=None, device="cpu", threads=1, save_model=save_model)


def _run(model_dir: str, out: Path, quant: str, save_model: bool = False) -> tuple[dict, list[Event]]:
    events: list[Event] = []
    return prune_model(_config(model_dir, out, quant, save_model), on_event=events.append), events


def test_int4_runs_groups_of_64_says_so_records_it_and_saves(model_dir: str, tmp_path: Path) -> None:
    result, events = _run(model_dir, tmp_path / "runs", "int4", save_model=True)
    warnings = [e.message for e in events if isinstance(e, RunWarning)]
    assert warnings == ["int4: group 64 chosen, 128 does not divide the 192-wide inputs (give int4:g128 to keep "
                        "128: each row's last group is then narrower and the checkpoint cannot be saved)"]
    assert result["quant"] == "int4:g64" and result["compression"]["quant"]["group_size"] == 64
    config = json.loads(Path(result["run_dir"], "config.json").read_text())
    assert config["quant"] == "int4:g64" and config["quant_asked"] == "int4"
    assert config["compression"]["label"] == "int4:g64"
    record = open_run(result["run_dir"])
    assert {record.load_quant(layer, name).group_size for layer, name in record.quant_names()} == {64}
    assert result["checkpoint"]["format"] != "dense" and Path(result["checkpoint"]["folder"]).is_dir()


def test_a_sweep_finds_the_fitted_run_by_what_was_asked(model_dir: str, tmp_path: Path) -> None:
    result, _ = _run(model_dir, tmp_path / "runs", "int4")
    found = find_finished(tmp_path / "runs", _config(model_dir, tmp_path / "runs", "int4").reuse_key())
    assert found is not None and found.run_id == result["run_id"]
    assert find_finished(tmp_path / "runs", _config(model_dir, tmp_path / "runs", "int4:g32").reuse_key()) is None


def test_a_given_group_runs_as_given(model_dir: str, tmp_path: Path) -> None:
    result, events = _run(model_dir, tmp_path / "runs", "int4:g128")
    assert result["quant"] == "int4:g128" and not [e for e in events if isinstance(e, RunWarning)]
    assert "quant_asked" not in json.loads(Path(result["run_dir"], "config.json").read_text())


def test_a_given_group_that_cannot_be_saved_is_refused_before_the_run_folder(model_dir: str, tmp_path: Path) -> None:
    with pytest.raises(ToolkitError) as caught:
        _run(model_dir, tmp_path / "runs", "int4:g128", save_model=True)
    message = str(caught.value)
    assert "int4:g128" in message and "g64" not in message and "\n" not in message
    assert not list((tmp_path / "runs").iterdir())


def test_a_model_128_divides_keeps_128_without_a_word(tmp_path: Path) -> None:
    result, events = _run("tiny-llama", tmp_path, "int4")
    assert result["quant"] == "int4:g128" and not [e for e in events if isinstance(e, RunWarning)]


def test_a_sweep_point_names_the_group_that_ran_and_is_reused(model_dir: str, tmp_path: Path) -> None:
    from toolkit.sweep import SweepPoint, plan, run_sweep

    base = RunConfig(model=model_dir, method="rtn", sparsity=None, quant=parse_quant("int4"), out_dir=str(tmp_path),
                     nsamples=2, seqlen=32, eval_seqlen=32, eval_windows=1, device="cpu", threads=1)
    configs, _ = plan(base, ["rtn"], [None], ["int4"])
    for reused in (False, True):
        (point,) = [p for p in run_sweep(configs) if isinstance(p, SweepPoint)]
        assert (point.status, point.reused, point.quant, point.sparsity) == ("finished", reused, "int4:g64", "int4:g64")
