"""Save and load models whose layers were shrunk by a block-scope method (heads / channels removed).

Two formats, chosen by :func:`save_shrunk` from the model itself:

- **Uniform** (every layer keeps the same head, KV-head and channel counts, e.g. ``--set
  uniform=true``): the block engine wrote the counts into ``model.config``
  (``num_attention_heads``, ``num_key_value_heads``, explicit ``head_dim``,
  ``intermediate_size``), so the folder is a **standard Hugging Face checkpoint**: plain
  ``AutoModelForCausalLM.from_pretrained(folder)`` loads it (tested with transformers; engines that
  read a standard Llama/Qwen2/Mistral/Gemma config with an explicit ``head_dim`` should too). No
  marker file is written.
- **Per-layer** (counts differ per layer, the default): the config keeps the original sizes and
  ``prunelab_structure.json`` beside the weights lists every layer's Linear shapes, bias flags and
  attention/MLP attributes. Only :func:`load_shrunk` (and :func:`toolkit.models.load.load_model`, which
  calls it when :func:`is_shrunk`) can load it: it builds the model from the config, rebuilds each
  layer's Linears at the saved shapes and then loads the weights, for HF transformers eager / sdpa
  attention with a dynamic KV cache. vLLM, llama.cpp, TGI and plain ``from_pretrained`` cannot.

Whether a standard config describes the model is decided by building the config's model on the
meta device and comparing every parameter shape.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.layers import decoder_layers
from toolkit.models.save import save_checkpoint
from toolkit.models.sources import MARKER
from toolkit.models.structure import BlockView, block_views
from toolkit.models.tokenizers import TextCodec

FORMAT = "prunelab-shrunk/1"


def config_describes(model: nn.Module) -> bool:
    """True when ``model.config`` alone rebuilds every parameter at its current shape."""
    from transformers import AutoModelForCausalLM

    try:
        from huggingface_hub.errors import StrictDataclassError as invalid
    except ImportError:
        invalid = ValueError
    try:
        with torch.device("meta"):
            reference = AutoModelForCausalLM.from_config(model.config)
    except (ValueError, TypeError, invalid):  # a config that fails its own validation describes nothing
        return False
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return ours == {k: tuple(v.shape) for k, v in reference.state_dict().items()}


def _attrs(view: BlockView) -> dict[str, dict[str, int]]:
    family = view.family
    attn = {a: int(cast(int, getattr(view.attn, a))) for a in (family.groups_attr, family.heads_attr) if a is not None}
    mlp = view.mlp
    sizes = {"intermediate_size": int(cast(int, mlp.intermediate_size))} if mlp is not None and hasattr(
        mlp, "intermediate_size") else {}
    return {"attn": attn, "mlp": sizes}


def layer_shapes(model: nn.Module) -> list[dict]:
    """Every layer's structural Linears (in, out, bias) and attributes, read from the model."""
    shapes = []
    for view in block_views(model, decoder_layers(model)):
        modules = {role: {"in": view.linear(role).in_features, "out": view.linear(role).out_features,
                          "bias": view.linear(role).bias is not None} for role in view.roles()}
        shapes.append({"modules": modules, **_attrs(view)})
    return shapes


def save_shrunk(model: nn.Module, codec: TextCodec, folder: str | Path) -> Path:
    """Save ``model`` and its tokenizer to ``folder`` (see the module docstring for the two formats).

    Returns the folder. The per-layer format adds ``prunelab_structure.json``.
    """
    folder = Path(folder)
    plain = config_describes(model)
    save_checkpoint(model, codec, folder)
    if not plain:
        record = {"format": FORMAT, "model_type": cast(Any, model.config).model_type, "layers": layer_shapes(model)}
        (folder / MARKER).write_text(json.dumps(record, indent=1))
    return folder


def _rebuild(view: BlockView, record: dict) -> None:
    for role, shape in record["modules"].items():
        parent, attr = view.parent(role)
        old = getattr(parent, attr)
        setattr(parent, attr, torch.nn.utils.skip_init(nn.Linear, shape["in"], shape["out"], bias=shape["bias"],
                                                       dtype=old.weight.dtype))
    for attr, value in record["attn"].items():
        setattr(view.attn, attr, value)
    for attr, value in record["mlp"].items():
        setattr(view.mlp, attr, value)


def _state_dict(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ToolkitError(f"{folder} has no .safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def load_shrunk(folder: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Rebuild a per-layer shrunk checkpoint saved by :func:`save_shrunk` (eval mode, CPU, ``dtype``).

    Raises :class:`ToolkitError` when the marker's format is unknown or the weights do not fit.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers: initialise, then overwrite
        no_init_weights = nullcontext
    folder = Path(folder)
    record = json.loads((folder / MARKER).read_text())
    if record.get("format") != FORMAT:
        raise ToolkitError(f"{folder / MARKER}: unknown format {record.get('format')!r} (expected {FORMAT})")
    config = AutoConfig.from_pretrained(folder)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    views = block_views(model, decoder_layers(model))
    if len(views) != len(record["layers"]):
        raise ToolkitError(f"{folder}: {len(record['layers'])} layers saved, the config builds {len(views)}")
    for view, layer in zip(views, record["layers"], strict=True):
        _rebuild(view, layer)
    missing, unexpected = model.load_state_dict(_state_dict(folder), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise ToolkitError(f"{folder}: weights do not fit the saved structure (missing {sorted(missing)[:4]}, "
                           f"unexpected {sorted(unexpected)[:4]})")
    if missing:
        model.tie_weights()
    return model.to(dtype).eval()
