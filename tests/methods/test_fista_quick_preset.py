"""The quick preset calibrates the reconstruction methods (FISTAPruner, SparseGPT, Thanos) on enough tokens.

With fewer calibration tokens than a linear has inputs, its Gram matrix G* = X*ᵀX*/N is rank-deficient and
a reconstruction method fits the calibration windows rather than the text: on the embedded model the quick
preset's 8 × 128 tokens (fewer than `down_proj`'s 1536 inputs) ranked FISTAPruner below Wanda, the reverse
of the CPU protocol. The preset now gives at least as many tokens as the widest linear input.
"""

from __future__ import annotations

import pytest
from torch import nn

from toolkit.models.load import load_model
from toolkit.run.protocols import CPU, PAPER, QUICK


def test_every_preset_has_more_tokens_than_the_embedded_models_widest_input_by_its_shape() -> None:
    widest = 1536  # SmolLM2-135M: hidden 576, intermediate (down_proj's input) 1536; checked by the slow test below
    for preset in (QUICK, CPU, PAPER):
        assert preset.nsamples * preset.seqlen >= widest, preset


@pytest.mark.slow
def test_the_quick_preset_covers_the_widest_linear_input_of_the_embedded_model() -> None:
    model = load_model("smollm2-135m").model
    layers = model.model.layers
    widest = max(m.in_features for m in layers.modules() if isinstance(m, nn.Linear))
    assert widest == 1536
    assert QUICK.nsamples * QUICK.seqlen >= widest
