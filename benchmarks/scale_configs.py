"""Real model shapes with random weights, for :mod:`benchmarks.bench_scale`: the configs and the checkpoint writer.

``SHAPES`` holds the Hugging Face ``config.json`` values of six real models, written out by hand (no hub
access). :func:`build_checkpoint` writes a random-weight checkpoint of one of them straight to safetensors,
one decoder layer at a time, from the state-dict names and shapes of a model built on the ``meta`` device:
host memory stays at about one layer (the largest group is the embeddings + ``lm_head``), and nothing is
randomly initialised by transformers (which takes minutes for 7 B parameters on a CPU).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec

_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
          "initializer_range": 0.02, "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
          "rope_scaling": None, "tie_word_embeddings": False, "use_cache": True, "bos_token_id": 1,
          "eos_token_id": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 4096,
          "vocab_size": 32000}

SHAPES: dict[str, dict[str, Any]] = {
    "llama-2-7b": {**_LLAMA, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32},
    "llama-3-8b": {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                   "max_position_embeddings": 8192, "rope_theta": 500000.0, "bos_token_id": 128000,
                   "eos_token_id": 128001},
    "qwen2.5-7b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                   "initializer_range": 0.02, "attention_dropout": 0.0, "hidden_size": 3584,
                   "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
                   "max_window_layers": 28, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
                   "use_cache": True, "bos_token_id": 151643, "eos_token_id": 151643},
    "llama-2-13b": {**_LLAMA, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
                    "num_attention_heads": 40, "num_key_value_heads": 40},
    "llama-2-70b": {**_LLAMA, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                    "num_attention_heads": 64, "num_key_value_heads": 8},
    # the embedded model's own config (toolkit.load_model("smollm2-135m").model.config): a small real shape
    "smollm2-135m": {**_LLAMA, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
                     "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True},
}
QKV_BIAS_FAMILIES = ("qwen2",)  # families whose q, k, v projections carry a bias
DTYPES = ("bfloat16", "float16", "float32")
BUILD_MARKER = "bench_scale_build.json"  # written last: a folder with it is complete and can be reused
BYTES_TOKENIZER = {"tokenizer": "bytes", "bos_id": ByteCodec.bos_id}  # as toolkit.models.save writes it
INIT_STD = 0.02
_LAYER_KEY = re.compile(r"\.layers\.(\d+)\.")


def shape_config(name: str, layers: int | None = None) -> dict[str, Any]:
    """The config values of shape ``name`` keeping its first ``layers`` decoder layers (None: all).

    Raises ``ValueError`` for an unknown name or a layer count outside 1..the model's layers.
    """
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}: use one of {', '.join(SHAPES)}")
    values = dict(SHAPES[name])
    total = values["num_hidden_layers"]
    if layers is not None:
        if not 1 <= layers <= total:
            raise ValueError(f"--layers must be in 1..{total} for {name}, got {layers}")
        values["num_hidden_layers"] = layers
    return values


def head_dim(shape: dict[str, Any]) -> int:
    """Width of one attention head: ``head_dim`` when given, else hidden / heads."""
    return int(shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"])


def layer_linears(shape: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The linears of one decoder layer as (name, in_features, out_features), in call order."""
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    q_out = shape["num_attention_heads"] * head_dim(shape)
    kv_out = shape.get("num_key_value_heads", shape["num_attention_heads"]) * head_dim(shape)
    return [("q_proj", hidden, q_out), ("k_proj", hidden, kv_out), ("v_proj", hidden, kv_out),
            ("o_proj", q_out, hidden), ("gate_proj", hidden, inter), ("up_proj", hidden, inter),
            ("down_proj", inter, hidden)]


def layer_params(shape: dict[str, Any]) -> int:
    """Parameters of one decoder layer: the seven linears, their biases where the family has them, two norms."""
    linears = layer_linears(shape)
    weights = sum(n_in * n_out for _, n_in, n_out in linears)
    biases = sum(n_out for _, _, n_out in linears[:3]) if shape["model_type"] in QKV_BIAS_FAMILIES else 0
    return weights + biases + 2 * shape["hidden_size"]


def param_count(shape: dict[str, Any]) -> int:
    """Parameters of the whole model from its shapes alone (nothing is allocated).

    Embeddings + ``num_hidden_layers`` decoder layers + the final norm + ``lm_head`` (unless tied).
    """
    embed = shape["vocab_size"] * shape["hidden_size"]
    head = 0 if shape.get("tie_word_embeddings") else embed
    return embed + shape["num_hidden_layers"] * layer_params(shape) + shape["hidden_size"] + head


def hf_config(shape: dict[str, Any], dtype: str) -> Any:
    """A transformers config of ``shape`` whose ``dtype`` is the stored dtype (config.json says it)."""
    from transformers import AutoConfig

    values = {key: value for key, value in shape.items() if key != "model_type"}
    config = AutoConfig.for_model(shape["model_type"], **values)
    config.dtype = dtype
    return config


def meta_parameters(config: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(state-dict name, shape) of every parameter of ``config``'s model, built on the meta device (no memory).

    Tied parameters appear once (``named_parameters`` drops duplicates), as ``save_pretrained`` writes them.
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [(name, tuple(param.shape)) for name, param in model.named_parameters()]


def shard_groups(names: list[tuple[str, tuple[int, ...]]]) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Parameters grouped into shards: first everything outside the decoder layers, then one group per layer."""
    outside: list[tuple[str, tuple[int, ...]]] = []
    layers: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for name, shape in names:
        match = _LAYER_KEY.search(name)
        if match is None:
            outside.append((name, shape))
        else:
            layers.setdefault(int(match.group(1)), []).append((name, shape))
    return [outside] + [layers[i] for i in sorted(layers)]


def random_tensors(group: list[tuple[str, tuple[int, ...]]], dtype: str, seed: int) -> Iterator[tuple[str, Any]]:
    """Tensors for ``group``, made one at a time: norm weights 1, biases 0, the rest N(0, 0.02²) seeded per tensor.

    The seed of the i-th tensor is ``seed + i``, so a group's values do not depend on the other groups.
    """
    import torch

    torch_dtype = getattr(torch, dtype)
    for index, (name, shape) in enumerate(group):
        if name.endswith("bias"):
            yield name, torch.zeros(shape, dtype=torch_dtype)
        elif len(shape) == 1:  # RMSNorm / LayerNorm weight
            yield name, torch.ones(shape, dtype=torch_dtype)
        else:
            generator = torch.Generator().manual_seed(seed + index)
            yield name, torch.empty(shape, dtype=torch_dtype).normal_(0.0, INIT_STD, generator=generator)


def _build_spec(shape: dict[str, Any], dtype: str, seed: int) -> dict[str, Any]:
    return {"shape": shape, "dtype": dtype, "seed": seed}


def is_built(folder: Path, shape: dict[str, Any], dtype: str, seed: int) -> bool:
    """True when ``folder`` holds a complete checkpoint built from exactly these inputs."""
    marker = folder / BUILD_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text(encoding="utf-8")) == _build_spec(shape, dtype, seed)
    except ValueError:
        return False


def build_checkpoint(shape: dict[str, Any], folder: str | Path, dtype: str = "bfloat16", seed: int = 0) -> dict:
    """Write a random-weight checkpoint of ``shape`` stored in ``dtype`` to ``folder``; returns a report.

    The folder gets config.json (``dtype`` = the stored dtype), one safetensors shard for the embeddings,
    final norm and ``lm_head`` and one per decoder layer, model.safetensors.index.json, and the byte-tokenizer
    marker of :mod:`toolkit.models.tokenizers` (``BYTES_MARKER``) instead of a tokenizer. Host memory holds one
    shard at a time. The report: folder, params, bytes (of the shards), shards, seconds.
    """
    from safetensors.torch import save_file

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    start = time.perf_counter()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / BUILD_MARKER).unlink(missing_ok=True)
    config = hf_config(shape, dtype)
    groups = shard_groups(meta_parameters(config))
    weight_map: dict[str, str] = {}
    total = params = 0
    for number, group in enumerate(groups, start=1):
        file = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        tensors = dict(random_tensors(group, dtype, seed + 1000 * number))
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        params += sum(t.numel() for t in tensors.values())
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map.update(dict.fromkeys(tensors, file))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    config.save_pretrained(folder)
    (folder / BYTES_MARKER).write_text(json.dumps(BYTES_TOKENIZER), encoding="utf-8")
    (folder / BUILD_MARKER).write_text(json.dumps(_build_spec(shape, dtype, seed)), encoding="utf-8")
    return {"folder": str(folder), "params": params, "bytes": total, "shards": len(groups),
            "seconds": round(time.perf_counter() - start, 2)}


def checkpoint_report(folder: str | Path) -> dict[str, Any]:
    """Bytes of the safetensors files in ``folder`` and the sorted set of their tensors' dtypes (headers only)."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    dtypes: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            dtypes.update(handle.get_slice(key).get_dtype() for key in handle.keys())  # noqa: SIM118 - not a dict
    return {"bytes": sum(f.stat().st_size for f in files), "dtypes": sorted(dtypes), "files": len(files)}
