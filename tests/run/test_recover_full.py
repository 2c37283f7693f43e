"""Full fine-tuning recovery (``recover --train full``: toolkit/engine/full_ft.py, toolkit/run/recover_train.py).

The decoder-layer linears train directly: the loss and the KL to the teacher go down, every weight a
keep-mask drops is exactly 0 after every step, a shrunk (heads+channels) or depth-pruned parent trains
in its own shapes and its saved model reloads at the perplexity the run reported; bad input is one line
before any run folder exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.recovery import fingerprint, parent_run, pruned_nonzero
from toolkit.api import evaluate_model, recover_model
from toolkit.cli.main import main
from toolkit.engine.distill import step_loss
from toolkit.engine.finetune import TrainSettings, train
from toolkit.engine.full_ft import start_full
from toolkit.engine.lora import linear_names
from toolkit.events import Event, RecoveryStep
from toolkit.models.layers import get_weight
from toolkit.models.load import load_model
from toolkit.store.runs import list_runs


def _masked_tiny(seed: int = 0) -> tuple[torch.nn.Module, dict[torch.nn.Module, torch.Tensor]]:
    """tiny-llama with half of every decoder-layer linear's weights set to 0; its keep-masks."""
    model = load_model("tiny-llama").model
    generator = torch.Generator().manual_seed(seed)
    masks = {}
    with torch.no_grad():
        for module in linear_names(model):
            weight = get_weight(module)
            keep = torch.rand(weight.shape, generator=generator) < 0.5
            weight.mul_(keep)
            masks[module] = keep
    return model, masks


def _windows(count: int, seqlen: int = 16) -> torch.Tensor:
    return torch.randint(0, 256, (count, seqlen), generator=torch.Generator().manual_seed(1))


def test_full_training_lowers_the_loss_and_keeps_every_dropped_weight_at_zero_after_every_step() -> None:
    model, masks = _masked_tiny()
    windows = _windows(1).repeat(5, 1)  # the same window every step: its loss must go down
    full = start_full(model, masks)
    assert {id(p) for p in full.params} == {id(m.weight) for m in masks}  # the linears only: AdamW states for them
    assert not any(p.requires_grad for n, p in model.named_parameters() if "embed" in n or "norm" in n)
    stray: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, RecoveryStep):
            stray.append(full.dropped_nonzero())

    settings = TrainSettings(steps=len(windows), batch_size=1, lr=1e-3, after_step=full.after_step)
    with torch.no_grad():
        before = float(model(input_ids=windows, labels=windows).loss)
    result = train(model, windows, settings, torch.device("cpu"), emit, lambda: False)
    full.finish()
    with torch.no_grad():
        after = float(model(input_ids=windows, labels=windows).loss)
    assert stray == [0] * len(windows)  # exactly 0 after every step
    assert after < before and result.losses[-1] < result.losses[0]
    assert sum(int(torch.count_nonzero(get_weight(m)[~k])) for m, k in masks.items()) == 0
    assert not any(p.requires_grad for p in model.parameters())  # frozen again


def test_full_training_by_distillation_lowers_the_kl_to_the_teacher() -> None:
    teacher = load_model("tiny-llama").model.eval()
    model, masks = _masked_tiny()
    windows = _windows(6)
    loss = step_loss(teacher, "kd", temperature=1.0)
    with torch.no_grad():
        before = float(loss(model, windows))
    full = start_full(model, masks)
    settings = TrainSettings(steps=6, batch_size=1, lr=2e-3, loss_fn=loss, after_step=full.after_step)
    train(model, windows, settings, torch.device("cpu"), lambda event: None, lambda: False)
    full.finish()
    with torch.no_grad():
        after = float(loss(model, windows))
    assert 0 < after < before
    assert full.dropped_nonzero() == 0


def test_a_bfloat16_model_trains_in_float32_and_comes_back_in_bfloat16() -> None:
    model, masks = _masked_tiny()
    model.to(torch.bfloat16)
    full = start_full(model, masks)
    assert all(p.dtype == torch.float32 for p in full.params)
    train(model, _windows(2), TrainSettings(steps=2, batch_size=1, lr=1e-3, after_step=full.after_step),
          torch.device("cpu"), lambda event: None, lambda: False)
    full.finish()
    assert next(model.parameters()).dtype == torch.bfloat16 and full.dropped_nonzero() == 0


def test_a_full_recovery_of_a_pruned_run_keeps_its_masks_and_records_the_choice(store: Path) -> None:
    (folder,) = list(store.iterdir())
    before = fingerprint(folder)
    result = recover_model(run=folder, steps=4, lr=1e-3, train="full", device="cpu")
    child = Path(result["run_dir"])
    assert fingerprint(folder) == before
    config = json.loads((child / "config.json").read_text())
    assert config["train"] == "full" and config["options"]["train"] == "full" and "rank" not in config
    assert result["options"]["train"] == "full" and "rank" not in result["options"]
    assert result["options"]["trainable"] == result["zeros"]["weights"] - result["zeros"]["dropped"]
    stray, dropped = pruned_nonzero(child / "model", folder)
    assert dropped > 0 and stray == 0 and result["zeros"]["dropped_nonzero"] == 0
    assert result["ppl"]["wiki"] < result["ppl_before"]["wiki"]
    parent_model: Any = load_model(str(folder / "model")).model
    child_model: Any = load_model(str(child / "model")).model
    changed = [not torch.equal(a, b) for a, b in zip(parent_model.parameters(), child_model.parameters(), strict=True)]
    assert any(changed)  # the linears moved …
    embed = (parent_model.get_input_embeddings().weight, child_model.get_input_embeddings().weight)
    assert torch.equal(*embed)  # … the embeddings did not


def test_the_default_learning_rate_of_full_is_the_smaller_one(store: Path) -> None:
    (folder,) = list(store.iterdir())
    result = recover_model(run=folder, steps=1, train="full", device="cpu", eval_windows=1)
    assert result["options"]["lr"] == 5e-5


@pytest.mark.parametrize("fields", [
    {"method": "numerical", "sparsity": "structured:50%", "unit": "heads+channels"},
    {"method": "depth", "sparsity": "structured:1 layer"},
], ids=["heads+channels", "depth"])
def test_a_shrunk_parent_trains_in_its_shapes_and_reloads_at_the_reported_perplexity(tmp_path: Path,
                                                                                     fields: dict) -> None:
    folder = parent_run(tmp_path / "runs", **fields)
    shapes = {n: tuple(p.shape) for n, p in load_model(str(folder / "model")).model.named_parameters()}
    result = recover_model(run=folder, steps=3, lr=1e-3, train="full", device="cpu")
    saved = Path(result["run_dir"]) / "model"
    per_layer = (folder / "model" / "prunelab_structure.json").is_file()
    assert (saved / "prunelab_structure.json").is_file() == per_layer  # the parent's format
    assert per_layer == (fields["method"] == "numerical")
    loaded = load_model(str(saved))
    assert {n: tuple(p.shape) for n, p in loaded.model.named_parameters()} == shapes
    ppl, _ = evaluate_model(loaded, seq_len=32, max_windows=2, device="cpu")
    assert ppl == pytest.approx(result["ppl"]["wiki"], rel=1e-5)
    assert result["ppl"]["wiki"] != result["ppl_before"]["wiki"]


@pytest.mark.parametrize(("args", "message"), [
    (["--train", "bogus"], "error: unknown --train 'bogus': use lora (masked-LoRA adapters) or full (the linear "
                           "weights themselves)"),
    (["--train", "full", "--rank", "4"], "error: --rank does not apply to --train full (it trains the weights "
                                         "themselves, no low-rank adapters): leave them out, or use --train lora"),
    (["--train", "full", "--rank", "4", "--alpha", "8"], "error: --rank and --alpha do not apply to --train full"),
])
def test_bad_train_input_is_one_line_and_writes_nothing(store: Path, capsys: pytest.CaptureFixture, args: list[str],
                                                        message: str) -> None:
    (folder,) = list(store.iterdir())
    before = fingerprint(store)
    assert main(["recover", str(folder), *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message) and "Traceback" not in err
    assert fingerprint(store) == before and len(list_runs(store)) == 1
