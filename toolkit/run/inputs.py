"""A run's input files checked against the model's layers: before the model loads, and once it is loaded.

Both checks run before the run folder exists (:func:`toolkit.run.pipeline.prepare`), so a bad
file is one line and leaves nothing in the run store, in memory and with ``--stream`` alike.

- :func:`check_input_files`, before any weight loads: an ``--allocation FILE.json`` against the
  decoder layers the model's files describe (:func:`layer_geometry`): one ratio per layer, and
  their total equal to ``--sparsity`` where the layers' sizes are known without the weights (a
  per-layer structure file gives them; a standard config builds every layer alike, so each
  weighs the same).
- :func:`check_input_files` also counts the tokens of a ``--calib`` text file with the model's own
  tokenizer where it is read without the model (the tiny models' bytes, a folder's
  ``tokenizer.json``) and refuses one too short for ``--nsamples`` windows of ``--seqlen``; the exact
  count (BOS included) is checked again when the windows are cut, still before the run folder.
- :func:`check_plan_fits`, on the loaded model (its exact layer sizes): the same checks, for
  sources whose files say nothing (a ``.gguf``, a hub id) and for configs whose layers differ.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from toolkit.data.text import SOURCES as TEXT_SOURCES
from toolkit.data.text import decode_text
from toolkit.engine.allocation import layer_sizes
from toolkit.errors import ToolkitError
from toolkit.models.embedded import embedded, is_embedded
from toolkit.models.gguf_cache import embedded_cache
from toolkit.models.layers import decoder_layers
from toolkit.models.sources import is_shrunk, run_model_folder
from toolkit.models.structure_file import layer_weights, read_structure
from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec
from toolkit.run.config import RunConfig
from toolkit.spec.allocation import FILE, Allocation, check_ratio_count, check_ratios, parse_allocation
from toolkit.spec.targets import Unstructured

_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")
_PER_LAYER = ("intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "ffn_dim")


@dataclass(frozen=True)
class LayerGeometry:
    """The decoder layers a model's files describe: their count, and their weight counts when known (else None)."""

    count: int
    sizes: tuple[int, ...] | None


def layer_geometry(model: str) -> LayerGeometry | None:
    """The decoder layers of ``model`` read from its files without loading weights; None when they do not say.

    A tiny model's config, the embedded model's converted config.json (once converted), a checkpoint
    or run folder's config.json or per-layer structure file. A ``.gguf`` or a hub id: None.
    """
    name = model.strip()
    if name.startswith("tiny-"):
        from toolkit.models.load import tiny_config  # a config object only, no weights

        config = tiny_config(name.removeprefix("tiny-")).to_dict()
        return _from_config(config)
    path = embedded_cache(embedded(name)) if is_embedded(name) else Path(name).expanduser()
    if not path.is_dir():
        return None
    path = run_model_folder(path) or path
    if is_shrunk(path):
        record = read_structure(path)
        sizes = tuple(layer_weights(record))
        return LayerGeometry(len(sizes), sizes)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, ValueError):
        return None
    return _from_config(config) if isinstance(config, dict) else None


def _from_config(config: dict) -> LayerGeometry | None:
    """Count (top level or ``text_config``); sizes equal unless a per-layer field is a list (layers that differ)."""
    for scope in (config, config.get("text_config")):
        if not isinstance(scope, dict):
            continue
        count = next((scope[key] for key in _COUNTS if isinstance(scope.get(key), int)
                      and not isinstance(scope.get(key), bool)), None)
        if count is not None and count > 0:
            alike = not any(isinstance(scope.get(key), list) for key in _PER_LAYER) and "block_configs" not in scope
            return LayerGeometry(count, (1,) * count if alike else None)
    return None


def _ratio_file(config: RunConfig) -> tuple[Allocation, float] | None:
    """The run's ratio-file allocation and its target, or None when it has none."""
    allocation = parse_allocation(config.allocation)
    if allocation.kind != FILE or not isinstance(config.sparsity, Unstructured):
        return None
    return allocation, config.sparsity.sparsity


def check_input_files(config: RunConfig) -> None:
    """Before the model loads: an allocation file against the model's layers, a calibration file's length."""
    check_calibration_length(config)
    planned = _ratio_file(config)
    if planned is None:
        return
    geometry = layer_geometry(config.model)
    if geometry is None:
        return  # the loaded model is checked (check_plan_fits) before the run folder exists
    allocation, target = planned
    source = f"allocation file {allocation.path!r}"
    if geometry.sizes is None:
        check_ratio_count(allocation.ratios, geometry.count, source)
    else:
        check_ratios(allocation.ratios, list(geometry.sizes), target, source)


def check_calibration_length(config: RunConfig) -> None:
    """One line when a ``--calib`` text file has too few tokens for ``nsamples`` windows of ``seqlen``.

    A window holds at least ``seqlen - 1`` text tokens (one less with a BOS), so a text of fewer than
    ``nsamples × (seqlen - 1)`` tokens can never be cut; the message matches
    :func:`toolkit.data.text.calibration_windows`, which checks the exact count later.
    """
    path = Path(config.calib)
    if config.calib in TEXT_SOURCES or not path.is_file():
        return
    count = _token_count(config.model, decode_text(path.read_bytes(), config.calib, config.encoding))
    body = config.seqlen - 1
    if count is not None and (count <= body + 1 or config.nsamples * body > count):
        raise ToolkitError(f"the calibration text has {count} tokens, fewer than nsamples × seqlen = "
                           f"{config.nsamples} × {config.seqlen}; lower --nsamples or --seqlen, or use a longer text")


@functools.lru_cache(maxsize=4)
def _token_count(model: str, text: str) -> int | None:
    """The tokens of ``text`` under ``model``'s tokenizer, read without the model; None when it cannot be.

    Cached: the CLI checks a run's input files before its protocol line and the run checks them again
    before its model loads; the same text is tokenized once.
    """
    name = model.strip()
    if name.startswith("tiny-"):
        return len(ByteCodec().encode(text))
    path = embedded_cache(embedded(name)) if is_embedded(name) else Path(name).expanduser()
    if not path.is_dir():
        return None
    path = run_model_folder(path) or path
    if (path / BYTES_MARKER).is_file():
        return len(ByteCodec().encode(text))
    if not (path / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer  # the fast tokenizer's own definition, as transformers loads it

    return len(Tokenizer.from_file(str(path / "tokenizer.json")).encode(text, add_special_tokens=False).ids)


def check_plan_fits(model: nn.Module, config: RunConfig) -> None:
    """On the loaded model, before the run folder exists: an allocation file against its exact layer sizes."""
    planned = _ratio_file(config)
    if planned is None:
        return
    allocation, target = planned
    check_ratios(allocation.ratios, layer_sizes(decoder_layers(model)), target, f"allocation file {allocation.path!r}")
