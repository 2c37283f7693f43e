"""Save any model in the format its shapes allow, and load the per-layer format back.

:func:`save_shrunk` decides the format from the MODEL (never from the method that changed it):

- **Standard** (the config rebuilds every parameter at its shape: a dense, masked or quantized
  model, or one shrunk uniformly, e.g. ``--set uniform=true``, where the block engine wrote the
  counts into ``model.config``: ``num_attention_heads``, ``num_key_value_heads``, explicit
  ``head_dim``, ``intermediate_size``): a **standard Hugging Face checkpoint**; plain
  ``AutoModelForCausalLM.from_pretrained(folder)`` loads it (tested with transformers; engines that
  read a standard Llama/Qwen2/Mistral/Gemma config with an explicit ``head_dim`` should too). No
  structure file is written.
- **Per-layer** (counts differ per layer, the default of a block-scope method, and every model
  pruned or quantized after loading such a checkpoint): ``prunelab_structure.json`` beside the
  weights lists every layer's Linear shapes, bias flags and attention/MLP attributes; config.json
  keeps the original sizes, but its ``model_type``, ``architectures`` and ``tie_word_embeddings``
  say ``load it with toolkit.load_model`` (the real values are in the structure file), so plain
  ``from_pretrained`` (with ``ignore_mismatched_sizes=True`` too, through the Auto classes or a
  concrete class) refuses the folder quoting that hint instead of loading re-initialised weights,
  and a tool that picks a model class by ``model_type`` or ``architectures`` finds none
  (:func:`mark_per_layer`). Only
  :func:`load_shrunk` (and :func:`toolkit.models.load.load_model`, which calls it when
  :func:`is_shrunk`) loads it: it builds the model from the config, rebuilds each layer's Linears at
  the saved shapes and then loads the weights, for HF transformers eager / sdpa attention with a
  dynamic KV cache. A pack-quantized per-layer checkpoint (:mod:`toolkit.models.save_quant`) is
  the same plus config.json's ``quantization_config``; its packed linears are decoded by
  :mod:`toolkit.models.packed`. Folders of format ``prunelab-shrunk/1`` (whose config.json kept the
  real ``model_type``) still load.

Whether a standard config describes the model is decided by building the config's model on the
meta device and comparing every parameter shape.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.layers import decoder_layers
from toolkit.models.packed import dequantize_state
from toolkit.models.save import save_checkpoint, without_quantization
from toolkit.models.sources import MARKER
from toolkit.models.structure import BlockView, block_views
from toolkit.models.structure_file import read_structure
from toolkit.models.tokenizers import TextCodec

FORMAT = "prunelab-shrunk/2"
LOAD_HINT = "per-layer shapes saved by PruneLab: load it with toolkit.load_model"


def config_describes(model: nn.Module) -> bool:
    """True when ``model.config`` alone rebuilds every parameter at its current shape."""
    from transformers import AutoModelForCausalLM

    try:
        from huggingface_hub.errors import StrictDataclassError as invalid
    except ImportError:
        invalid = ValueError
    try:  # a quantization config (a dequantized checkpoint) would build quantized modules: the shapes are float
        with torch.device("meta"), without_quantization(model):
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


def structure_record(model: nn.Module) -> dict[str, Any] | None:
    """The per-layer structure file's content for ``model``, or None when its config describes it (standard)."""
    if config_describes(model):
        return None
    return {"format": FORMAT, "model_type": cast(Any, model.config).model_type, "layers": layer_shapes(model)}


def mark_per_layer(folder: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the structure file of ``folder`` and make its config.json name the only loader.

    config.json's ``model_type`` and ``architectures`` become the real ones followed by
    :data:`LOAD_HINT` (the Auto classes refuse an unknown model type, quoting it), and
    ``tie_word_embeddings`` becomes :data:`LOAD_HINT` (a concrete class such as ``LlamaForCausalLM``
    refuses a config whose flag is not a bool, quoting it). The real values go to the structure
    file's ``config`` (None: the key was absent), from which :func:`load_shrunk` restores them.
    """
    path = folder / "config.json"
    config = json.loads(path.read_text())
    real = {key: config.get(key) for key in ("model_type", "architectures", "tie_word_embeddings")}
    config["model_type"] = f"{config['model_type']} ({LOAD_HINT})"
    config["architectures"] = [f"{name} ({LOAD_HINT})" for name in config.get("architectures") or []]
    config["tie_word_embeddings"] = LOAD_HINT
    (folder / MARKER).write_text(json.dumps(record | {"config": real}, indent=1))
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_shrunk(model: nn.Module, codec: TextCodec, folder: str | Path) -> Path:
    """Save any float ``model`` and its tokenizer to ``folder`` (the format follows its shapes: module docstring).

    Returns the folder; the per-layer format adds ``prunelab_structure.json``. Written under a
    ``.partial`` name, removed on failure (:func:`toolkit.models.save.save_checkpoint`).
    """
    record = structure_record(model)
    return save_checkpoint(model, codec, folder, finish=None if record is None else partial(mark_per_layer,
                                                                                             record=record))


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


def _config(folder: Path, record: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """A per-layer folder's real config (restored from the structure file) and its quantization config."""
    from transformers import AutoConfig

    data = json.loads((folder / "config.json").read_text())
    for key, value in record.get("config", {"model_type": record["model_type"]}).items():  # format /1: model_type
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    quantization = data.pop("quantization_config", None)
    return AutoConfig.for_model(**data), quantization


def load_shrunk(folder: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Rebuild a per-layer checkpoint saved by :func:`save_shrunk` or pack-quantized (eval mode, CPU, ``dtype``).

    Packed linears are dequantized to ``dtype`` (:func:`toolkit.models.packed.dequantize_state`).
    Raises :class:`ToolkitError` when the structure file's format is unknown or the weights do not fit.
    """
    from transformers import AutoModelForCausalLM

    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers: initialise, then overwrite
        no_init_weights = nullcontext
    folder = Path(folder)
    record = read_structure(folder)  # every field checked: one line naming a bad one
    config, quantization = _config(folder, record)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    views = block_views(model, decoder_layers(model))
    if len(views) != len(record["layers"]):
        raise ToolkitError(f"{folder}: {len(record['layers'])} layers saved, the config builds {len(views)}")
    for view, layer in zip(views, record["layers"], strict=True):
        _rebuild(view, layer)
    state = _state_dict(folder)
    if quantization is not None:
        state = dequantize_state(state, model, quantization, dtype)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)  # no second copy of the weights
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise ToolkitError(f"{folder}: weights do not fit the saved structure (missing {sorted(missing)[:4]}, "
                           f"unexpected {sorted(unexpected)[:4]})")
    if missing:
        model.tie_weights()
    return model.to(dtype).eval()
