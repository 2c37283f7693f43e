"""Load a model (embedded default, HF id, local dir, GGUF, tiny random) and find its decoder layers.

Decoder layers are found generically: the ``nn.ModuleList`` holding the most parameters whose
entries contain linears. Prunable linears are ``nn.Linear`` and GPT-2's ``Conv1D`` (whose weight
is stored (in, out) and is transposed on the way in and out). Embeddings and ``lm_head`` sit
outside the decoder layers and are never pruned.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.embedded import embedded, is_embedded
from toolkit.models.gguf_cache import converted_embedded, converted_gguf
from toolkit.models.lineage import DENSE_BUILT, UNKNOWN, Lineage, quantized_source, read_lineage
from toolkit.models.shrunk import load_shrunk
from toolkit.models.sources import (
    EMBEDDED,
    TINY_FAMILIES,
    check_model_source,
    hub_reachable,
    is_shrunk,
    run_model_folder,
)
from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec, HFCodec, TextCodec
from toolkit.runtime.precision import STORAGE_DTYPES

log = logging.getLogger(__name__)

BOS_FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_text")  # trained with BOS at the start of every input


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and a label saying where it came from."""

    model: nn.Module
    codec: TextCodec
    name: str
    label: str
    source: Path | None = None  # the file or folder the weights were read from (None: built or hub)
    lineage: Lineage = UNKNOWN  # where its exact zeros come from (toolkit.models.lineage)


def bos_id(loaded: LoadedModel) -> int | None:
    """BOS id for models that need it at the start of every window (Gemma), else None."""
    return loaded.codec.bos_id if getattr(loaded.model.config, "model_type", "") in BOS_FAMILIES else None


def config_dtype(path: Path) -> torch.dtype:
    """The dtype a checkpoint folder's config.json says its weights are stored in (float32 when it says none)."""
    config = path / "config.json"
    data = json.loads(config.read_text()) if config.is_file() else {}
    name = data.get("dtype") or data.get("torch_dtype") or "float32"
    dtype = STORAGE_DTYPES.get(str(name).removeprefix("torch."))
    return dtype if dtype is not None else torch.float32


def _load_embedded(name: str, dtype: torch.dtype | None) -> LoadedModel:
    """An embedded model from its cached safetensors (dequantized from its GGUF once), in its own dtype by default."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = embedded(name)
    cached = converted_embedded(spec)
    held = dtype or getattr(torch, spec.dtype)
    model = AutoModelForCausalLM.from_pretrained(cached, use_safetensors=True, dtype=held)
    codec = HFCodec(AutoTokenizer.from_pretrained(cached))
    return LoadedModel(model, codec, spec.name, spec.label, cached, quantized_source(spec.quantization))


def tiny_config(family: str):  # noqa: ANN201 - a transformers PretrainedConfig
    """A 2-layer randomly initialisable config of ``family`` (widths divisible by 8 for n:m).

    ``gemma3`` has 4 layers, sliding-window (8 tokens) and full-attention ones alternating, each
    kind with its own rotary base, as Gemma-3 (whose pattern is 5 sliding : 1 full).
    """
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig, OPTConfig, Qwen2Config

    vocab = ByteCodec.vocab_size
    if family == "gemma3":
        return Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                                max_position_embeddings=512, sliding_window=8, pad_token_id=None,
                                layer_types=["sliding_attention", "full_attention"] * 2,
                                bos_token_id=ByteCodec.bos_id, eos_token_id=ByteCodec.bos_id)
    if family == "llama":
        return LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    if family == "qwen2":
        return Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    if family == "opt":
        return OPTConfig(vocab_size=vocab, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=512, word_embed_proj_dim=64)
    if family == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=512,
                          bos_token_id=ByteCodec.bos_id, eos_token_id=ByteCodec.bos_id)
    raise ToolkitError(f"unknown tiny family {family!r}: use one of {', '.join(TINY_FAMILIES)}")


def _load_tiny(family: str, seed: int = 0, dtype: torch.dtype | None = None) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family)).float()  # drawn in float32, then stored in dtype
    for param in model.parameters():  # parameters only: rotary tables stay float32, as from_pretrained keeps them
        param.data = param.data.to(dtype or torch.float32)
    return LoadedModel(model.eval(), ByteCodec(), f"tiny-{family}", f"tiny random {family} (seed {seed})",
                       lineage=DENSE_BUILT)


def _load_dir(path: Path, trust_remote_code: bool, dtype: torch.dtype | None) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or config_dtype(path)

    packed = _compressed_tensors(path)
    extra: dict[str, Any] = {}
    if packed:
        from transformers import CompressedTensorsConfig

        # dequantized at load: plain float32 Linears, so every forward path (the evaluation calls the base
        # model, which skips the lazy decompression hook of the causal-LM wrapper) sees the same weights
        extra["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    per_layer = is_shrunk(path)
    with warnings.catch_warnings():  # transformers warns that only `dequantize` of our config is used: intended
        warnings.filterwarnings("ignore", message="You passed `quantization_config`")
        model = load_shrunk(path, dtype) if per_layer else AutoModelForCausalLM.from_pretrained(
            path, use_safetensors=True, dtype=dtype, trust_remote_code=trust_remote_code, **extra
        )
    # the model's config: a per-layer folder's config.json names no model type transformers knows
    codec = ByteCodec() if (path / BYTES_MARKER).exists() else HFCodec(
        AutoTokenizer.from_pretrained(path, config=model.config))
    kinds = (["per-layer shapes"] if per_layer else []) + ([f"{packed}, dequantized"] if packed else [])
    label = f"local checkpoint {path}" + (f" ({'; '.join(kinds)})" if kinds else "")
    return LoadedModel(model, codec, str(path), label, path, read_lineage(path))


def _compressed_tensors(path: Path) -> str:
    """The compressed-tensors format of the checkpoint in ``path`` (e.g. ``pack-quantized``), or ""."""
    config = path / "config.json"
    if not config.is_file():
        return ""
    quant = json.loads(config.read_text()).get("quantization_config") or {}
    return str(quant.get("format", "")) if quant.get("quant_method") == "compressed-tensors" else ""


def _load_local(path: Path, trust_remote_code: bool, dtype: torch.dtype | None) -> LoadedModel:
    """A .gguf file or checkpoint folder; what transformers refuses becomes one line saying what to do."""
    try:
        return _load_gguf(path, dtype) if path.suffix == ".gguf" else _load_dir(path, trust_remote_code, dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if isinstance(exc, ToolkitError):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ToolkitError(f"could not load model {str(path)!r} ({type(exc).__name__}: {first[:300]}); check that "
                           "the folder or file is a complete checkpoint of a causal language model") from None


def _load_gguf(path: Path, dtype: torch.dtype | None) -> LoadedModel:
    """A ``.gguf`` dequantized once into the cache (bfloat16 unless ``dtype`` says otherwise), then loaded from it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    held = dtype or torch.bfloat16
    folder = converted_gguf(path, held)
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, dtype=held)
    codec = HFCodec(AutoTokenizer.from_pretrained(folder))
    lineage = read_lineage(folder)
    return LoadedModel(model, codec, str(path), f"{path.name} (GGUF, dequantized)", folder, lineage)


def _load_hub(name: str, trust_remote_code: bool, dtype: torch.dtype | None) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local_only = not hub_reachable()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, use_safetensors=True, dtype=dtype or "auto", trust_remote_code=trust_remote_code,
            local_files_only=local_only,
        )
        codec = HFCodec(AutoTokenizer.from_pretrained(name, local_files_only=local_only))
    except (OSError, ValueError) as exc:
        if local_only:
            raise ToolkitError(
                f"model {name!r} is not a local folder or file, and as a Hugging Face hub id it needs the hub, which "
                f"is not reachable (and it is not in the local cache); go online once, or use {EMBEDDED!r}, a local "
                "checkpoint folder or a .gguf file"
            ) from None
        raise ToolkitError(
            f"could not load model {name!r} from the Hugging Face hub ({str(exc).splitlines()[0]}); check the id "
            f"(e.g. facebook/opt-125m), or use {EMBEDDED!r}, a local checkpoint folder or a .gguf file"
        ) from None
    return LoadedModel(model, codec, name, f"{name} (Hugging Face hub)")


def load_model(name: str = EMBEDDED, *, dtype: str = "auto", trust_remote_code: bool = False) -> LoadedModel:
    """Load ``name``: an embedded model, a tiny one, a checkpoint or run folder, a .gguf or a hub id.

    Embedded: "smollm2-135m", "gemma-3-270m"; tiny: "tiny-<llama|opt|gpt2|qwen2|gemma3>".
    The model comes back in eval mode, on the CPU (the engine moves one layer at a time to the
    device), in ``dtype``: ``auto`` keeps the checkpoint's own (config.json's ``dtype``, bfloat16
    for most; float32 when it names none), bfloat16 for a ``.gguf`` and gemma-3-270m (dequantized
    once into the cache), float32 for the embedded smollm2-135m (its published figures) and the tiny
    models; ``float32`` | ``bfloat16`` | ``float16`` cast at load. A run
    folder (``prune --out runs --save-model``) loads the model it saved (``<run>/model``), saying so
    in one logged line. Raises :class:`ToolkitError` with what to do for an unknown name or dtype, or
    a run folder that saved no model.
    """
    name = (name or "").strip()
    if not name:
        raise ToolkitError(f"no model given: use {EMBEDDED!r}, a local directory, a .gguf file or a hub id")
    if dtype not in STORAGE_DTYPES:
        raise ToolkitError(f"unknown --dtype {dtype!r}: use one of {', '.join(STORAGE_DTYPES)}")
    check_model_source(name)  # what can be told from the files, before any weights are read
    saved = run_model_folder(Path(name).expanduser()) if Path(name).expanduser().is_dir() else None
    if saved is not None:
        log.warning("%s is a run folder: loading the model it saved, %s", Path(name).expanduser(), saved)
        name = str(saved)
    asked = STORAGE_DTYPES[dtype]
    if is_embedded(name):
        loaded = _load_embedded(name, asked)
    elif name.startswith("tiny-"):
        loaded = _load_tiny(name.removeprefix("tiny-"), dtype=asked)
    elif name.endswith(".gguf") or Path(name).expanduser().is_dir():
        loaded = _load_local(Path(name).expanduser(), trust_remote_code, asked)
    else:
        loaded = _load_hub(name, trust_remote_code, asked)
    loaded.model.eval()
    config: Any = loaded.model.config  # a transformers PretrainedConfig
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return loaded


