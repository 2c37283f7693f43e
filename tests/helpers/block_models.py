"""Tiny random decoders for the block-scope tests (GQA 9/3 like SmolLM2, Qwen2, Gemma, OPT, Mixtral, GPT-2)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from toolkit.engine.block.driver import BlockResult, prune_blocks
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.methods import get_method
from toolkit.spec.compression import parse_compression

VOCAB = 257


def tiny(family: str, heads: int = 9, kv_heads: int = 3, layers: int = 3, seed: int = 0) -> nn.Module:
    """A float32 eval-mode model of ``family`` with head_dim 8 (q width 72 ≠ hidden 64 for Qwen2/Mistral/Gemma)."""
    import transformers as tf

    hidden = 72 if family in ("llama", "mixtral") else 64  # Llama's config wants hidden % heads == 0
    common = {"vocab_size": VOCAB, "hidden_size": hidden, "intermediate_size": 96, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "max_position_embeddings": 128}
    configs = {
        "llama": lambda: tf.LlamaConfig(**common, head_dim=8),
        "qwen2": lambda: tf.Qwen2Config(**common, head_dim=8),
        "mistral": lambda: tf.MistralConfig(**common, head_dim=8),
        "gemma": lambda: tf.GemmaConfig(**common, head_dim=8),
        "mixtral": lambda: tf.MixtralConfig(**common, head_dim=8, num_local_experts=2, num_experts_per_tok=1),
        "opt": lambda: tf.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=96, num_hidden_layers=layers,
                                    num_attention_heads=8, max_position_embeddings=128, word_embed_proj_dim=64),
        "gpt2": lambda: tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=layers, n_head=8, n_positions=128,
                                      bos_token_id=0, eos_token_id=0),
    }
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(configs[family]())
    with torch.no_grad():  # HF's init is tiny (std 0.02): make every unit matter
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
    return model.float().eval()


def windows(num: int = 8, seq: int = 24, seed: int = 0) -> torch.Tensor:
    """Random calibration token windows (num, seq)."""
    return torch.randint(0, VOCAB, (num, seq), generator=torch.Generator().manual_seed(seed))


def prune(model: nn.Module, method: str = "numerical", ratio: str = "structured:30%", unit: str | None = None,
          **options: object) -> tuple[BlockResult, list, WriteBack, list[dict]]:
    """Run prune_blocks in place; returns (result, events, journal, structures handed to on_structure)."""
    spec = get_method(method)
    events: list = []
    structures: list[dict] = []
    journal = WriteBack()
    cfg = EngineConfig(batch_size=3, device="cpu", error_windows=2)
    result = prune_blocks(model, windows(), spec, parse_compression(ratio, None, unit), spec.make_config(options),
                          cfg=cfg, emit=events.append, writeback=journal, on_structure=structures.append)
    return result, events, journal, structures


def logits(model: nn.Module, seed: int = 1) -> torch.Tensor:
    """Logits of a fixed random batch."""
    with torch.no_grad():
        return model(input_ids=windows(2, 20, seed)).logits


def pruned_and_masked(model: nn.Module, **kwargs: object) -> tuple[nn.Module, nn.Module, BlockResult]:
    """The same run twice: units removed, and units zeroed with shapes kept."""
    removed, masked = copy.deepcopy(model), copy.deepcopy(model)
    result = prune(removed, **kwargs)[0]
    prune(masked, remove=False, **kwargs)
    return removed, masked, result
