"""A recovery's zeros and sparsity are counted on the recovered weights (toolkit/run/recover_zeros.py).

The hostile case: a parent whose keep-mask file was rewritten to keep every weight of one linear.
The masked update then trains that linear's pruned weights; the summary must say so with the
measured numbers, never "every pruned weight is exactly 0" and the parent's sparsity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolkit.api import recover_model
from toolkit.cli.recover import summary_lines, zeros_line
from toolkit.events import RunWarning
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.store.runs import open_run
from toolkit.store.writer import mask_file

QUICK = {"steps": 3, "lr": 1e-2}
LINEAR = (0, "self_attn.q_proj")


def _zeros(model_dir: Path) -> tuple[int, int, int]:
    """(zeros of every decoder linear, their weights, zeros of LINEAR) in a saved checkpoint."""
    model = load_model(str(model_dir)).model
    zeros = total = linear = 0
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer_linears(layer).items():
            weight = get_weight(module)
            zeros, total = zeros + int((weight == 0).sum()), total + weight.numel()
            if (index, name) == LINEAR:
                linear = int((weight == 0).sum())
    return zeros, total, linear


def test_a_faithful_recovery_counts_its_zeros_on_the_recovered_weights(parent: Path, store: Path) -> None:
    folder = store / parent.name
    result = recover_model(run=folder, **QUICK)
    zeros_before, total, _ = _zeros(folder / "model")
    zeros_after, _, _ = _zeros(Path(result["run_dir"]) / "model")
    measured = result["zeros"]
    assert measured["parent_zeros"] == zeros_before and measured["still_zero"] == zeros_before
    assert measured["zeros"] == zeros_after and measured["weights"] == total and measured["dropped_nonzero"] == 0
    assert result["achieved_sparsity"] == pytest.approx(zeros_after / total)
    assert result["achieved_sparsity"] == pytest.approx(0.5, abs=1e-3)
    assert result["accounting"]["nonzeros_kept"] == total - zeros_after
    line = next(x for x in summary_lines(result) if x.startswith("masks"))
    assert line.startswith(f"masks kept: all {zeros_before:,} weights that were exactly 0 in the parent's model")
    assert f"achieved sparsity {zeros_after / total:.4f} (counted on the recovered weights" in line


def test_a_mask_file_rewritten_to_keep_everything_is_reported_not_hidden(parent: Path, store: Path) -> None:
    folder = store / parent.name
    layer, name = LINEAR
    keep = open_run(folder).load_mask(layer, name)
    np.savez(folder / "masks" / mask_file(layer, name), bits=np.packbits(np.ones(keep.size, dtype=bool)),
             shape=np.array(keep.shape))  # the tampered file: every weight of q_proj kept
    pruned_there = int((~keep).sum())
    events: list = []
    result = recover_model(run=folder, on_event=events.append, **QUICK)
    zeros_before, total, _ = _zeros(folder / "model")
    zeros_after, _, linear_after = _zeros(Path(result["run_dir"]) / "model")
    measured = result["zeros"]
    assert measured["kept_zeros"] == pruned_there and linear_after < pruned_there  # q_proj's pruned weights trained
    assert measured["still_zero"] == zeros_before - (pruned_there - linear_after)
    assert measured["trained"][0] == {"layer": layer, "name": name, "kept_zeros": pruned_there,
                                      "nonzero_after": pruned_there - linear_after}
    assert result["achieved_sparsity"] == pytest.approx(zeros_after / total)
    assert result["achieved_sparsity"] < result["parent_achieved_sparsity"] - 0.01
    line = next(x for x in summary_lines(result) if x.startswith("masks"))
    assert line.startswith(f"masks NOT kept: {pruned_there - linear_after:,} of the {zeros_before:,} weights")
    assert f"layer 0 {name}: {pruned_there - linear_after:,}" in line and "exactly 0 in the merged" not in line
    (warning,) = [e for e in events if isinstance(e, RunWarning)]
    assert f"keep {pruned_there:,} weights that are exactly 0 in the saved model" in warning.message


def test_the_line_reports_the_measured_numbers() -> None:
    zeros = {"parent_zeros": 10, "still_zero": 10, "dropped_nonzero": 0, "achieved_sparsity": 0.25, "trained": []}
    assert zeros_line(zeros, 0.5) == ("masks kept: all 10 weights that were exactly 0 in the parent's model are "
                                      "still 0; achieved sparsity 0.2500 (counted on the recovered weights, the "
                                      "parent's 0.5000)")
    lost = {**zeros, "still_zero": 6, "trained": [{"layer": 1, "name": "mlp.up_proj", "nonzero_after": 4}]}
    assert zeros_line(lost, None).startswith("masks NOT kept: 4 of the 10 weights that were exactly 0 in the "
                                             "parent's model are nonzero after recovery (layer 1 mlp.up_proj: 4)")
