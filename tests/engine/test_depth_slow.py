"""Depth pruning on the embedded model (slow: loads smollm2-135m; `make test` and CI run it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.engine.block.driver import prune_blocks
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers
from toolkit.models.load import load_model
from toolkit.models.shrunk import save_shrunk
from toolkit.spec.compression import parse_compression


@pytest.mark.slow
def test_four_layers_removed_reload_in_plain_transformers_with_equal_logits(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    loaded = load_model("smollm2-135m")
    model = loaded.model
    vocab = int(getattr(model, "config").vocab_size)  # noqa: B009
    calibration = torch.randint(0, vocab, (4, 64), generator=torch.Generator().manual_seed(0))
    spec = get_method("depth")
    prune_blocks(model, calibration, spec, parse_compression("structured:4 layers"), spec.make_config({}),
                 cfg=EngineConfig(batch_size=2, device="cpu"), emit=lambda event: None, writeback=WriteBack())
    assert len(decoder_layers(model)) == 26
    ids = torch.randint(0, vocab, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine = model(input_ids=ids).logits
    folder = save_shrunk(model, loaded.codec, tmp_path / "model")
    assert not (folder / "prunelab_structure.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert getattr(plain, "config").num_hidden_layers == 26 and plain.dtype == model.dtype  # noqa: B009
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, mine, rtol=0, atol=1e-4)
