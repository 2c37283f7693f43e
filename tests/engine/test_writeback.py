"""The write-back journal swaps a weight's data instead of overwriting it, and undoes every change."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from toolkit.engine.writeback import WriteBack
from toolkit.models.layers import get_weight


@pytest.mark.parametrize("budget", [None, 0])  # backups in memory, or every one in a file
def test_the_former_weight_stays_valid_and_restore_brings_it_back(budget: int | None) -> None:
    torch.manual_seed(0)
    lin = nn.Linear(8, 5).to(torch.bfloat16)
    param = lin.weight
    before = get_weight(lin).detach()
    copy = before.clone()
    journal = WriteBack(budget_bytes=budget)
    journal.weight(lin, torch.zeros(5, 8))
    assert lin.weight is param and lin.weight.dtype == torch.bfloat16  # the same parameter, its own dtype
    assert float(lin.weight.abs().sum()) == 0.0
    assert torch.equal(before, copy)  # the data was swapped, not written over
    journal.restore()
    assert torch.equal(lin.weight, copy) and len(journal) == 0


def test_an_upcast_layer_is_backed_up_in_the_storage_dtype() -> None:
    lin = nn.Linear(6, 4)  # float32, as a bfloat16 layer is held on a CPU for its passes
    stored = lin.weight.detach().to(torch.bfloat16)
    lin.weight.data = stored.float()
    journal = WriteBack(budget_bytes=None)
    journal.weight(lin, torch.ones(4, 6), backup_dtype=torch.bfloat16)
    assert journal._held == 4 * 6 * 2  # bfloat16 bytes
    journal.restore()
    assert torch.equal(lin.weight, stored.float())


def test_conv1d_weights_are_written_in_their_layout() -> None:
    from transformers.pytorch_utils import Conv1D

    conv = Conv1D(5, 8)  # weight (in, out) = (8, 5)
    old = conv.weight.detach().clone()
    journal = WriteBack()
    new = torch.arange(40.0).reshape(5, 8)  # (out, in)
    journal.weight(conv, new)
    assert torch.equal(get_weight(conv), new) and conv.weight.shape == (8, 5)
    journal.restore()
    assert torch.equal(conv.weight, old)


def test_the_journal_budget_spills_large_layers_from_the_first_backup() -> None:
    from toolkit.engine.state import EngineConfig, journal_budget_bytes

    assert journal_budget_bytes(EngineConfig(), large_layers=False) == 512 * 2**20
    assert journal_budget_bytes(EngineConfig(), large_layers=True) == 0
    assert journal_budget_bytes(EngineConfig(journal_budget_mb=64), large_layers=True) == 64 * 2**20
