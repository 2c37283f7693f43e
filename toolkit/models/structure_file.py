"""The per-layer structure file of a shrunk checkpoint (``prunelab_structure.json``), read and checked. Torch-free.

:func:`toolkit.models.shrunk.save_shrunk` writes it beside the weights of a model whose layers differ in
shape; :func:`read_structure` reads it for the loader and for the checks made before any weight
loads (:func:`toolkit.models.sources.check_model_source`). Its shape::

    {"format": "prunelab-shrunk/2", "model_type": "llama",
     "layers": [{"modules": {"q": {"in": 64, "out": 32, "bias": false}, …},
                 "attn": {"num_key_value_groups": 2}, "mlp": {"intermediate_size": 96}}, …],
     "config": {…}}

Every field is checked for its type, and the count of layers against config.json's own count,
so a damaged or foreign file is one line naming the field and what it should be, never a
``TypeError`` from the loader or a count that blames the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError

MARKER = "prunelab_structure.json"
READABLE = ("prunelab-shrunk/1", "prunelab-shrunk/2")  # the newest last: shrunk.FORMAT writes it
_SIZE_LIMIT = 64 * 2**20  # a structure file is kilobytes; a bigger one is not ours
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")


def read_structure(folder: str | Path) -> dict[str, Any]:
    """The checked structure record of ``folder`` (module docstring); one-line :class:`ToolkitError` otherwise."""
    path = Path(folder) / MARKER
    where = str(path)
    if not path.is_file():
        raise ToolkitError(f"{where} is not a regular file; restore the structure file saved with the model")
    try:
        if path.stat().st_size > _SIZE_LIMIT:
            raise ToolkitError(f"{where} is larger than {_SIZE_LIMIT >> 20} MiB: it is not a PruneLab structure file")
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ToolkitError(f"{where} is not readable JSON ({str(exc).splitlines()[0][:120]}); restore the structure "
                           "file saved with the model") from None
    if not isinstance(record, dict):
        raise ToolkitError(f"{where} must hold a JSON object with format, model_type and layers")
    if record.get("format") not in READABLE:
        raise ToolkitError(f"{where}: unknown format {record.get('format')!r} (expected {READABLE[-1]})")
    if not isinstance(record.get("model_type"), str):
        raise ToolkitError(f"{where}: \"model_type\" must be a string such as \"llama\", got "
                           f"{_kind(record.get('model_type'))}")
    if "config" in record and not isinstance(record["config"], dict):
        raise ToolkitError(f"{where}: \"config\" must be an object of config.json values, got "
                           f"{_kind(record['config'])}")
    layers = record.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ToolkitError(f"{where}: \"layers\" must be a non-empty list with one object per decoder layer, got "
                           f"{_kind(layers)}")
    for index, layer in enumerate(layers):
        _check_layer(layer, f"{where}: layers[{index}]")
    expected = _config_layers(Path(folder) / "config.json")
    if expected is not None and expected != len(layers):
        raise ToolkitError(f"{where} lists {len(layers)} decoder layers, config.json says {expected}: the structure "
                           "file belongs to another model; restore the one saved with these weights")
    return record


def layer_weights(record: dict[str, Any]) -> list[int]:
    """The weight count of every layer's structural linears (Σ in × out) in a record of :func:`read_structure`."""
    return [sum(shape["in"] * shape["out"] for shape in layer["modules"].values()) for layer in record["layers"]]


def _check_layer(layer: object, where: str) -> None:
    """One line naming the first field of one layer entry that has the wrong type."""
    if not isinstance(layer, dict):
        raise ToolkitError(f"{where} must be an object with \"modules\", \"attn\" and \"mlp\", got {_kind(layer)}")
    modules = layer.get("modules")
    if not isinstance(modules, dict) or not modules:
        raise ToolkitError(f"{where}.modules must be an object of linears such as {{\"q\": {{\"in\": 64, \"out\": 64, "
                           f"\"bias\": false}}}}, got {_kind(modules)}")
    for role, shape in modules.items():
        if not isinstance(shape, dict):
            raise ToolkitError(f"{where}.modules.{role} must be an object with in, out and bias, got {_kind(shape)}")
        for key in ("in", "out"):
            value = shape.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ToolkitError(f"{where}.modules.{role}.{key} must be a whole number ≥ 0, got {_kind(value)}")
        if not isinstance(shape.get("bias"), bool):
            raise ToolkitError(f"{where}.modules.{role}.bias must be true or false, got {_kind(shape.get('bias'))}")
    for part in ("attn", "mlp"):
        values = layer.get(part, {})
        if not isinstance(values, dict):
            raise ToolkitError(f"{where}.{part} must be an object of whole numbers, got {_kind(values)}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ToolkitError(f"{where}.{part}.{name} must be a whole number ≥ 0, got {_kind(value)}")


def _config_layers(config: Path) -> int | None:
    """The decoder-layer count config.json gives (top level or ``text_config``); None when it gives none."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, ValueError):
        return None
    for scope in (data, data.get("text_config") if isinstance(data, dict) else None):
        if isinstance(scope, dict):
            for key in _LAYER_COUNTS:
                value = scope.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
    return None


def _kind(value: object) -> str:
    """A short description of a JSON value for a message: ``the string 'ab'``, ``a list``, ``nothing``."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, bool | int | float):
        return f"{type(value).__name__} {value!r}"
    return "a list" if isinstance(value, list) else "an object"
