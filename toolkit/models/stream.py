"""A safetensors checkpoint opened one decoder layer at a time, and a writer of the result layer by layer.

For models larger than host memory (docs/scale.md): :func:`open_streamed` builds the model on the
meta device (``accelerate.init_empty_weights(include_buffers=False)``: non-persistent buffers such
as the rotary ``inv_freq`` are computed for real) and loads only what sits outside the decoder
layers (embeddings, final norm, ``lm_head``; tied to the embeddings when the config says so) from
the shards, memory-mapped, tensor by tensor. :meth:`StreamedModel.load_layer` materialises one
layer on the CPU and :meth:`StreamedModel.release_layer` puts it back on meta, so host memory is
one layer plus the activations plus the embeddings. :class:`ShardWriter` writes each finished
layer to a shard of its own and the index, config and tokenizer at the end, under
``<folder>.partial`` renamed when complete (as :func:`toolkit.models.save.save_checkpoint`).

A compressed-tensors ``pack-quantized`` checkpoint (what ``--stream --quant`` writes) opens too: its packed
linears are dequantized as their layer loads (:mod:`toolkit.models.stream_quant`).

Parameters are swapped in and out with :func:`torch.utils.swap_tensors`, so every module keeps
its parameter objects (ties included) while their storage moves between meta and the CPU.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.models.embedded import is_embedded
from toolkit.models.layers import decoder_layers
from toolkit.models.load import LoadedModel, config_dtype
from toolkit.models.sources import (
    SAFETENSORS_INDEX,
    check_model_source,
    check_shards,
    is_shrunk,
)
from toolkit.models.stream_quant import load_packed, packed_config, packed_weights
from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec, HFCodec, TextCodec
from toolkit.runtime.precision import STORAGE_DTYPES

NEEDS_FOLDER = "streaming needs a local safetensors checkpoint folder (config.json, *.safetensors, tokenizer)"
REST_SHARD = "model-rest.safetensors"
COPIED_FILES = ("generation_config.json",)  # copied from the source into a streamed output as they are


def layer_shard(index: int) -> str:
    """The file name of decoder layer ``index``'s shard in a streamed output (``model-layer-00012.safetensors``)."""
    return f"model-layer-{index:05d}.safetensors"


@dataclass
class StreamedModel:
    """A checkpoint whose decoder layers live on the meta device until :meth:`load_layer` brings one in.

    ``loaded.model`` holds everything outside the decoder layers on the CPU in ``dtype`` (its
    buffers computed for real); ``shards`` maps every tensor name of the checkpoint to its shard
    file in ``folder``; a layer's keys are ``prefix + str(index) + "." + name in the layer``.
    """

    loaded: LoadedModel
    folder: Path
    shards: dict[str, str]
    prefix: str
    dtype: torch.dtype
    quant: dict[str, Any] | None = None  # a pack-quantized checkpoint's quantization_config (linears dequantized)

    @property
    def layers(self) -> nn.ModuleList:
        """The model's decoder layers (parameters on meta unless loaded)."""
        return decoder_layers(self.loaded.model)

    def layer_keys(self, index: int, layer: nn.Module) -> dict[str, str]:
        """Name in the layer → checkpoint key, for the layer's parameters and persistent buffers."""
        return {name: f"{self.prefix}{index}.{name}" for name in layer.state_dict(keep_vars=True)}

    def load_layer(self, index: int, layer: nn.Module) -> None:
        """Materialise decoder layer ``index`` (``layer``) on the CPU from the shards, in its storage dtype.

        Parameters keep their objects (their storage is swapped in); persistent buffers are
        overwritten with the checkpoint's values; non-persistent buffers are left as computed. In a
        pack-quantized checkpoint the packed linears are dequantized (:mod:`toolkit.models.stream_quant`).
        """
        keys = self.layer_keys(index, layer)
        packed = packed_weights(keys, self.shards) if self.quant is not None else {}
        _load_into(layer, self.folder, self.shards, {name: key for name, key in keys.items() if name not in packed})
        if packed and self.quant is not None:
            load_packed(layer, self.folder, self.shards, packed, self.loaded.model, self.quant)

    def release_layer(self, index: int, layer: nn.Module) -> None:
        """Put decoder layer ``index``'s parameters back on the meta device, freeing their host memory."""
        del index  # every layer is released the same way; the index keeps the call symmetric with load_layer
        for param in _distinct(layer.parameters()):
            if param.device.type != "meta":
                torch.utils.swap_tensors(param, nn.Parameter(torch.empty_like(param, device="meta"),
                                                             requires_grad=param.requires_grad))

    def layer_tensors(self, index: int, layer: nn.Module) -> dict[str, Tensor]:
        """Checkpoint key → tensor (CPU, contiguous, storage dtype) of a loaded decoder layer, for the writer."""
        state = layer.state_dict()
        return _own_storage({key: state[name] for name, key in self.layer_keys(index, layer).items()})

    def rest_tensors(self) -> dict[str, Tensor]:
        """Checkpoint key → tensor of everything outside the decoder layers that the source checkpoint holds.

        Tied weights the source leaves out (``lm_head.weight`` tied to the embeddings) stay out; a tensor
        stored under two keys is copied, so each key owns its storage.
        """
        state = self.loaded.model.state_dict()
        return _own_storage({k: t for k, t in state.items() if not k.startswith(self.prefix) and k in self.shards})


def _own_storage(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """``tensors`` detached and contiguous; one sharing storage with an earlier one is copied (as safetensors needs)."""
    seen: set[int] = set()
    owned: dict[str, Tensor] = {}
    for key, tensor in tensors.items():
        tensor = tensor.detach().contiguous()
        owned[key] = tensor.clone() if tensor.untyped_storage().data_ptr() in seen else tensor
        seen.add(tensor.untyped_storage().data_ptr())
    return owned


def open_streamed(folder: str | Path, dtype: str = "auto") -> StreamedModel:
    """Open the safetensors checkpoint ``folder`` for streaming: decoder layers on meta, the rest on the CPU.

    ``dtype`` as :func:`toolkit.models.load.load_model` (``auto``: config.json's). Checks first, reading
    no weights: the folder is a local safetensors checkpoint (not a built-in, a .gguf, a hub id, a
    per-layer shrunk checkpoint, nor quantized other than compressed-tensors pack-quantized, whose linears are
    dequantized as each layer loads), its shards are complete (:func:`check_shards`) and they hold every
    tensor of the model the config describes. Raises a one-line :class:`ToolkitError` naming
    the input, the decoder layer and tensor that is missing, or what to do.
    """
    path = _check_folder(folder)
    if dtype not in STORAGE_DTYPES:
        raise ToolkitError(f"unknown --dtype {dtype!r}: use one of {', '.join(STORAGE_DTYPES)}")
    storage = STORAGE_DTYPES[dtype] or config_dtype(path)
    shards = check_shards(path)
    quant = packed_config(path)
    model = _empty_model(path, storage, quantized=quant is not None)
    layers = decoder_layers(model)
    prefix = next(name for name, module in model.named_modules() if module is layers) + "."
    state = {key: key for key in model.state_dict()}
    missing = {key for key in state if key not in shards and key not in packed_weights(state, shards)}
    model.tie_weights(missing_keys=missing)  # lm_head → embeddings when the config ties and the checkpoint omits it
    _check_missing(missing, prefix, path)
    codec: TextCodec = ByteCodec() if (path / BYTES_MARKER).exists() else _hf_codec(path)
    rest = {key: key for key in model.state_dict() if not key.startswith(prefix) and key in shards}
    _load_into(model, path, shards, rest)
    loaded = LoadedModel(model, codec, str(path), f"local checkpoint {path} (streamed layer by layer)", path)
    return StreamedModel(loaded, path, shards, prefix, storage, quant)


def _empty_model(path: Path, storage: torch.dtype, *, quantized: bool = False) -> Any:
    """The causal LM ``path``'s config.json describes, in eval mode, every parameter on meta in ``storage``.

    Buffers are real (rotary tables computed); parameters the class keeps in float32 are float32 on meta.
    ``quantized``: the config's pack-quantized ``quantization_config`` is dropped (the linears are float
    once loaded). Raises :class:`ToolkitError` for another quantized config or one transformers cannot build.
    """
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config: Any = AutoConfig.from_pretrained(path)
        if quantized:
            del config.quantization_config
        if getattr(config, "quantization_config", None):
            raise ToolkitError(f"{NEEDS_FOLDER} of float weights; {str(path)!r} is quantized: load it in memory")
        with init_empty_weights(include_buffers=False):
            model: Any = AutoModelForCausalLM.from_config(config, dtype=storage)
    except (OSError, ValueError, KeyError) as exc:
        if isinstance(exc, ToolkitError):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ToolkitError(f"could not build the model of {str(path)!r} from its config.json ({type(exc).__name__}: "
                           f"{first[:300]}); streaming needs a causal language model transformers knows") from None
    _keep_in_float32(model, storage)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return model.eval()


def _check_folder(folder: str | Path) -> Path:
    """The checkpoint folder ``folder`` names, or a one-line error saying streaming needs one."""
    name = str(folder).strip()
    path = Path(name).expanduser()
    if (is_embedded(name) or name.startswith("tiny-")) and not path.is_dir():
        raise ToolkitError(f"{NEEDS_FOLDER}; {name!r} is a built-in model: save it with save_checkpoint first, "
                           "or prune it in memory")
    if name.endswith(".gguf"):
        raise ToolkitError(f"{NEEDS_FOLDER}; {name!r} is a GGUF file: load it in memory, or convert it with "
                           "save_pretrained first")
    if not path.is_dir():
        what = "a file" if path.exists() else "not a folder (a hub id? download it first with `hf download ID`)"
        raise ToolkitError(f"{NEEDS_FOLDER}; {name!r} is {what}")
    check_model_source(str(path))
    if is_shrunk(path):
        raise ToolkitError(f"{NEEDS_FOLDER} of the config's shapes; {name!r} is a per-layer shrunk checkpoint: "
                           "load it in memory instead")
    return path


def _check_missing(missing: set[str], prefix: str, folder: Path) -> None:
    """Raise naming the first tensor of the model (decoder layer first) that the shards do not hold."""
    if not missing:
        return

    def order(key: str) -> tuple[int, str]:
        head = key.removeprefix(prefix).split(".", 1)[0]
        return (int(head) if key.startswith(prefix) and head.isdigit() else -1, key)

    key = min(missing, key=order)
    layer = order(key)[0]
    where = f"decoder layer {layer} tensor {key}" if layer >= 0 else f"tensor {key}"
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise ToolkitError(f"{where} is missing from the safetensors of {str(folder)!r}{more}; the checkpoint is "
                       "incomplete or of another architecture than its config.json: download it again")


def _keep_in_float32(model: Any, storage: torch.dtype) -> None:
    """Put the parameters the model keeps in float32 at ``storage`` (``_keep_in_fp32_modules``) on meta in float32.

    As ``from_pretrained`` does: its dtype plan names them by patterns searched in the parameter names.
    """
    plan = model._get_dtype_plan(storage) if hasattr(model, "_get_dtype_plan") else {}
    patterns = [(re.compile(str(pattern).replace("*", ".*")), dtype) for pattern, dtype in plan.items()]
    for name, param in model.named_parameters():
        dtype = next((d for pattern, d in patterns if pattern.search(name)), None)
        if dtype is not None and param.dtype != dtype:
            torch.utils.swap_tensors(param, nn.Parameter(torch.empty_like(param, device="meta", dtype=dtype),
                                                         requires_grad=param.requires_grad))


def _hf_codec(path: Path) -> TextCodec:
    from transformers import AutoTokenizer

    return HFCodec(AutoTokenizer.from_pretrained(path))


def _distinct(tensors: Iterable[Tensor]) -> list[Tensor]:
    """``tensors`` without repeats (a tied parameter is listed once)."""
    seen: dict[int, Tensor] = {}
    for tensor in tensors:
        seen.setdefault(id(tensor), tensor)
    return list(seen.values())


def _load_into(module: nn.Module, folder: Path, shards: dict[str, str], keys: dict[str, str]) -> None:
    """Fill ``module``'s tensors named in ``keys`` (name in module → checkpoint key) from the shards.

    Each shard is opened once (memory-mapped); each tensor is read alone and cast to the dtype the
    module holds it in. A parameter on meta gets the read tensor swapped into its object; a
    parameter already on the CPU (tied to one read before) or a persistent buffer is copied into.
    """
    from safetensors import safe_open

    state = module.state_dict(keep_vars=True)
    by_shard: dict[str, list[str]] = {}
    for name, key in keys.items():
        by_shard.setdefault(shards[key], []).append(name)
    done: set[int] = set()
    for shard, names in by_shard.items():
        with safe_open(str(folder / shard), framework="pt", device="cpu") as handle:
            for name in names:
                target = state[name]
                if id(target) in done:
                    continue
                done.add(id(target))
                value = handle.get_tensor(keys[name]).to(target.dtype)
                if tuple(value.shape) != tuple(target.shape):
                    raise ToolkitError(f"tensor {keys[name]} in {shard} has shape {tuple(value.shape)}, the model "
                                       f"expects {tuple(target.shape)}; the checkpoint does not match its config.json")
                if isinstance(target, nn.Parameter) and target.device.type == "meta":
                    torch.utils.swap_tensors(target, nn.Parameter(value, requires_grad=target.requires_grad))
                else:
                    with torch.no_grad():
                        target.copy_(value)


class ShardWriter:
    """Writes a streamed model to ``folder``: one shard per decoder layer, the rest, then index, config, tokenizer.

    Everything goes to ``<folder>.partial`` (created at the first write) and is renamed to ``folder``
    by :meth:`finish`; :meth:`abort` removes the partial folder. Refuses, before writing anything, a
    ``folder`` that holds a checkpoint (config.json or ``*.safetensors``) or anything else, and a
    ``<folder>.partial`` left by another run.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()
        self.partial = self.folder.with_name(self.folder.name + ".partial")
        self.weight_map: dict[str, str] = {}
        self.total_size = 0
        self._floats: dict[torch.dtype, int] = {}  # numel per floating dtype written
        self._created = False
        _check_out_folder(self.folder, self.partial)

    def _write(self, shard: str, tensors: dict[str, Tensor]) -> None:
        """Save ``tensors`` (key → CPU tensor) as ``shard`` in the partial folder and index them."""
        from safetensors.torch import save_file

        if not self._created:
            self.partial.mkdir(parents=True)
            self._created = True
        save_file(tensors, str(self.partial / shard), metadata={"format": "pt"})
        for key, tensor in tensors.items():
            self.weight_map[key] = shard
            self.total_size += tensor.numel() * tensor.element_size()
            if tensor.is_floating_point():
                self._floats[tensor.dtype] = self._floats.get(tensor.dtype, 0) + tensor.numel()

    def write_layer(self, index: int, tensors: dict[str, Tensor]) -> None:
        """Write decoder layer ``index``'s tensors (checkpoint key → tensor) to its own shard."""
        self._write(layer_shard(index), tensors)

    def write_rest(self, tensors: dict[str, Tensor]) -> None:
        """Write the tensors outside the decoder layers (embeddings, final norm, lm_head) to ``model-rest``."""
        self._write(REST_SHARD, tensors)

    def finish(self, config: Any, codec: TextCodec, *, copy_from: Path | None = None,
               before_rename: Callable[[Path], None] = lambda partial: None) -> Path:
        """Write the index, config.json (``dtype``: the shards' storage dtype) and the tokenizer; rename; return it.

        ``config`` is the model's transformers config (its ``dtype`` is set to what the shards hold);
        ``copy_from`` is the source checkpoint, whose :data:`COPIED_FILES` are copied when present;
        ``before_rename(partial)`` runs last in the partial folder (a quantized run adds its quantization_config).
        """
        assert self._created, "finish() before any tensor was written"
        index = {"metadata": {"total_size": self.total_size}, "weight_map": dict(sorted(self.weight_map.items()))}
        (self.partial / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
        floats = self._floats or {torch.float32: 1}
        config.dtype = max(floats, key=lambda d: floats[d])  # what most weights are stored in, as storage_dtype
        config.save_pretrained(self.partial)
        for name in COPIED_FILES:
            if copy_from is not None and (copy_from / name).is_file():
                shutil.copyfile(copy_from / name, self.partial / name)
        if isinstance(codec, HFCodec):
            codec.tokenizer.save_pretrained(self.partial)
        elif isinstance(codec, ByteCodec):
            (self.partial / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": codec.bos_id}))
        before_rename(self.partial)
        self.partial.rename(self.folder)
        self._created = False
        return self.folder

    def abort(self) -> None:
        """Remove the partial folder this writer created (nothing else is touched)."""
        if self._created:
            shutil.rmtree(self.partial, ignore_errors=True)
            self._created = False


def _check_out_folder(folder: Path, partial: Path) -> None:
    """Raise unless ``folder`` is new or an empty folder, and no ``<folder>.partial`` is in the way."""
    if folder.exists() and not folder.is_dir():
        raise ToolkitError(f"cannot stream into {str(folder)!r}: it is a file; give a new folder")
    if folder.is_dir():
        names = {p.name for p in folder.iterdir()}
        if "config.json" in names or any(n.endswith(".safetensors") for n in names):
            raise ToolkitError(f"cannot stream into {str(folder)!r}: it already holds a checkpoint (config.json or "
                               "*.safetensors), which is never overwritten; give a new folder")
        if names:
            raise ToolkitError(f"cannot stream into {str(folder)!r}: it is not empty; give a new or empty folder")
    if partial.exists():
        raise ToolkitError(f"cannot stream into {str(folder)!r}: {str(partial)!r} exists (another streamed run is "
                           "writing it, or one was killed); remove it and run again")
