"""A tiny source GGUF for the export tests: a tiny model's hyper-parameters as llama.cpp's converter names them.

It has no tokenizer (the tiny models use a byte codec); the export copies whatever metadata the source
has, so a round trip through transformers' GGUF reader needs nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFWriter


def write_source(config: Any, path: Path) -> Path:
    """A GGUF holding only the metadata of ``config`` (llama or gemma3_text) and one tensor (GGUF needs none)."""
    import numpy as np

    arch = "gemma3" if config.model_type.startswith("gemma3") else config.model_type
    writer = GGUFWriter(path, arch)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_string("general.name", "tiny test source")
    if arch == "gemma3":
        writer.add_sliding_window(config.sliding_window)
    writer.add_tensor("placeholder", np.zeros(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
