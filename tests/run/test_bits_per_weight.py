"""One bits-per-weight figure, with its definition (toolkit/run/accounting.py), in the table and the summary.

On tiny-llama at int4:g128 the linears are 64 or 128 inputs wide, so their bits differ (4.3125 and
4.15625): the layer table once showed their plain mean (4.290) beside the accounting's weighted
figure (4.278), and the checkpoint's on-disk figure (4.524) under the same name.
"""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.cli.view import checkpoint_summary, layer_table, summary
from toolkit.methods.quant_grid import bits_per_weight
from toolkit.models.load import load_model
from toolkit.run.accounting import account, linear_shapes
from toolkit.spec.compression import QuantSpec

INT4 = QuantSpec(4, 128, False)


def _rows(model: torch.nn.Module) -> list[dict]:
    return [{"layer": layer, "name": name, "rel_error": 0.1, "sparsity": 0.0, "shape": [rows, cols],
             "bits": bits_per_weight(INT4, cols)} for (layer, name), (rows, cols) in linear_shapes(model).items()]


def test_the_table_and_the_accounting_give_the_same_figure() -> None:
    model = load_model("tiny-llama").model
    shapes = linear_shapes(model)
    acct = account(model, shapes, {}, dict.fromkeys(shapes, INT4))
    weights = sum(r * c for r, c in shapes.values())
    by_hand = sum(r * c * (4 + 20 * math.ceil(c / 128) / c if c > 128 else 4 + 20 / c)
                  for r, c in shapes.values()) / weights
    assert acct.bits_per_weight == pytest.approx(by_hand) == pytest.approx(4.2778, abs=1e-4)
    assert acct.bits_counted == "int4:g128 codes + 16-bit scales + 4-bit zero points per weight of the " \
                                "decoder-layer linears"
    table = layer_table({"layers": _rows(model)}).splitlines()
    assert all(line.endswith(f"{acct.bits_per_weight:.3f}") for line in table[2:])  # not the plain mean 4.290
    assert "4.290" not in "\n".join(table)


def test_a_dense_run_counts_its_dtype(capsys: pytest.CaptureFixture) -> None:
    model = load_model("tiny-llama").model
    acct = account(model, linear_shapes(model), {}, {})
    assert acct.bits_per_weight == 32.0 and acct.bits_counted.startswith("float32 values (32 bits) per weight")


def test_the_summary_shows_one_figure_with_its_definition_and_labels_the_disk_figure(
        capsys: pytest.CaptureFixture) -> None:
    model = load_model("tiny-llama").model
    shapes = linear_shapes(model)
    acct = account(model, shapes, {}, dict.fromkeys(shapes, INT4)).to_dict()
    checkpoint = {"format": "pack-quantized", "compressed_tensors": "0", "bytes": 2**20, "size_vs_dense_bf16": 0.8,
                  "dense_bf16_bytes": 2**21, "quantized_linears": 14, "bits_per_weight": 4.524, "folder": "r/model"}
    summary({"method": "rtn", "compression": {"label": "int4:g128"}, "achieved_sparsity": 0.0, "prune_seconds": 1.0,
             "peak_rss_mb": 1.0, "devices": "cpu", "accounting": acct, "dense_ppl": {}, "ppl": {}, "run_dir": "r",
             "checkpoint": checkpoint})
    out = capsys.readouterr().out
    assert "4.278 bits/weight (int4:g128 codes + 16-bit scales + 4-bit zero points per weight" in out
    assert out.count("bits/weight") == 2 and "not the bits/weight above" in out  # the disk figure says what it is
    checkpoint_summary(checkpoint)
    assert "tensors take 4.524 bits per weight on disk (codes packed in int32 words" in capsys.readouterr().out
