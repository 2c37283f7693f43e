"""Export a finished run's saved model for a serving engine: ``python -m toolkit export RUN --format gguf``.

Everything is checked before the model loads (:func:`check_export`): the run folder, its saved model,
the source GGUF its metadata and tokenizer come from, the output path, the type asked. Then
:func:`export_run` loads the saved model, reads the run's quantization states and writes the GGUF
(:mod:`toolkit.models.gguf_export`).

``--type auto``: a quantized run's linears in the block type that holds its grid code for code (Q4_0,
Q4_1, Q8_0; another grid is re-quantized, with the error printed), every other weight in F16 (BF16
for a model held in bfloat16, whose range F16 may not hold); a float run in that float type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.store.runs import RunRecord, open_run

FORMATS = ("gguf",)
TYPES = ("auto", "f32", "f16", "bf16", "q4_0", "q4_1", "q8_0")


@dataclass(frozen=True)
class ExportConfig:
    """One export: the run folder, the format, the type, where to write and whether to overwrite."""

    run_dir: str
    format: str = "gguf"
    type: str = "auto"
    out: str | None = None
    force: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ToolkitError(f"--format {self.format!r} is not one PruneLab writes: use {', '.join(FORMATS)}")
        if self.type not in TYPES:
            raise ToolkitError(f"--type {self.type!r} is not a GGUF type PruneLab writes: use one of "
                               f"{', '.join(TYPES)}")


@dataclass(frozen=True)
class ExportPlan:
    """What the checks found: the run, its saved model, the source GGUF, the output and what to say first."""

    record: RunRecord
    model_dir: Path
    source: Path
    out: Path
    quantized: bool
    notes: list[str] = field(default_factory=list)


def _run(run_dir: str) -> RunRecord:
    path = Path(run_dir).expanduser()
    if not (path / "config.json").is_file() or not (path / "status.json").is_file():
        raise ToolkitError(f"{run_dir!r} is not a run folder; give a folder of the run store, e.g. runs/<id> "
                           "(`python -m toolkit runs --out STORE` lists them)")
    record = open_run(path)
    if record.status != "finished":
        raise ToolkitError(f"run {record.run_id} is {record.status}, not finished: export a finished run")
    return record


def source_gguf(model: str, seen: int = 0) -> Path:
    """The GGUF a run's model came from: an embedded model's, a user's ``.gguf``, or that of the run it pruned."""
    from toolkit.models.embedded import assemble, embedded, is_embedded
    from toolkit.models.sources import cache_dir

    if is_embedded(model):
        entry = embedded(model)
        return assemble(entry, cache_dir() / entry.gguf)
    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    if seen < 8 and (path / "status.json").is_file() and (path / "config.json").is_file():
        parent = open_run(path).config.get("model")
        if isinstance(parent, str):
            return source_gguf(parent, seen + 1)
    raise ToolkitError(f"the run's model {model!r} did not come from a GGUF, so there is no tokenizer and metadata to "
                       "carry over: GGUF export supports runs of the embedded models and of .gguf files")


def check_export(config: ExportConfig) -> ExportPlan:
    """Every check that needs no model: one line on what is wrong and what to do."""
    from toolkit.models.sources import is_shrunk

    record = _run(config.run_dir)
    model_dir = record.path / "model"
    if not (model_dir / "config.json").is_file():
        raise ToolkitError(f"run {record.run_id} saved no model: prune again with --save-model, then export that run")
    if is_shrunk(model_dir):
        raise ToolkitError(f"run {record.run_id} is shrunk with per-layer head and channel widths, which llama.cpp "
                           "cannot express (its llama and gemma3 graphs take one head count and one FFN width for "
                           "every layer); export a float, quantized or depth-pruned run, or a shrink that keeps "
                           "every layer alike")
    compression = record.compression
    source = source_gguf(str(record.config.get("model", "")))
    out = Path(config.out).expanduser() if config.out else record.path / f"{record.run_id}.gguf"
    if out.exists() and not config.force:
        raise ToolkitError(f"{out} exists: give another --out, or --force to replace it")
    if not out.parent.is_dir():
        raise ToolkitError(f"the folder of --out {out} does not exist; create it or give another path")
    notes = []
    sparsity = compression.get("sparsity")
    if isinstance(sparsity, dict) and sparsity.get("kind") in ("unstructured", "nm"):
        notes.append(f"the run's {sparsity.get('label')} sparsity is stored dense: GGUF has no sparse weights, so "
                     "the pruned weights are written as zeros and the file is no smaller or faster for them")
    quantized = bool(record.quant_names())
    if config.type in ("q4_0", "q4_1", "q8_0") and not quantized:
        raise ToolkitError(f"run {record.run_id} is not quantized: --type {config.type} would quantize it here, which "
                           "is a quantization run's job (prune with --method rtn|gptq|awp --quant int4:g32); export "
                           "it with --type auto|f16|bf16|f32")
    return ExportPlan(record=record, model_dir=model_dir, source=source, out=out, quantized=quantized, notes=notes)


def _states(record: RunRecord) -> dict[str, Any]:
    """The run's stored quantization states by weight name (``model.layers.3.mlp.up_proj.weight``)."""
    import torch

    from toolkit.methods.quant_grid import QuantState
    from toolkit.spec.compression import QuantSpec

    states = {}
    for layer, name in record.quant_names():
        stored = record.load_quant(layer, name)
        spec = QuantSpec(bits=stored.bits, group_size=stored.group_size, symmetric=stored.symmetric)
        states[f"model.layers.{layer}.{name}.weight"] = QuantState(
            torch.from_numpy(stored.codes), torch.from_numpy(stored.scales), torch.from_numpy(stored.zeros), spec)
    return states


def export_run(config: ExportConfig, plan: ExportPlan | None = None,
               progress: Callable[[str], None] | None = None) -> Any:
    """Load the run's saved model and write the GGUF; returns the :class:`~toolkit.models.gguf_export.ExportReport`."""
    from toolkit.models.gguf_export import ExportTypes, export_gguf, native_float
    from toolkit.models.load import load_model

    plan = plan or check_export(config)
    loaded = load_model(str(plan.model_dir))
    as_blocks = plan.quantized and config.type not in ("f32", "f16", "bf16")  # a float type: the dequantized weights
    states = _states(plan.record) if as_blocks else {}
    model = loaded.model
    missing = [name for name in states if name not in dict(model.named_parameters())]
    if missing:
        raise ToolkitError(f"run {plan.record.run_id}: quantization states for weights the saved model does not have "
                           f"({missing[0]}, …); the run record and its model disagree")
    blocks = config.type if config.type in ("q4_0", "q4_1", "q8_0") else None
    floats = config.type if config.type in ("f32", "f16", "bf16") else native_float(model)
    return export_gguf(model, states, plan.source, plan.out, ExportTypes(floats, blocks), progress)
