"""What a saved model costs: bytes on disk, memory to load it, prefill and decode speed, beside its dense source.

``python -m toolkit measure DIR`` (:mod:`toolkit.cli.measure`) calls :func:`measure`. For each model
(the folder, then its dense source, in one process):

- ``bytes_on_disk``: the ``*.safetensors`` files of its folder as saved (``folder_bytes``: every file,
  config and tokenizer included); None for a model that is no folder (a built-in tiny model);
- ``load``: ``host_peak_mb``, measured in a fresh Python process that imports torch, transformers and
  PruneLab's loader, then loads the model with :func:`load_model`: its peak resident memory during the
  load minus its resident memory before (Linux ``VmHWM`` reset through ``/proc/self/clear_refs``; the
  mapped safetensors pages the load touched, the model's code imported on first use and the tokenizer
  count too, alike for both models); ``host_ready_mb``, the same peak after one forward pass of
  :data:`READY_TOKENS` tokens (transformers may map the safetensors file rather than copy it, so the
  weights' pages become resident when first used: this is the memory to load and run the model);
  None with ``host_note`` saying why where it could not be measured;
  on CUDA ``device_mb``, the memory allocated to move the model onto the device
  (``torch.cuda.max_memory_allocated`` delta, in this process);
- ``speed``: :func:`toolkit.evaluation.speed.compare` of both models, repeats interleaved, at each
  batch size, in the model's own dtype on the chosen device.

The models then load again in this process, one after the other, and stay loaded (their speed is
measured together).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import DEFAULT_PROMPTS, encode_prompt
from toolkit.evaluation.speed import check_speed_args, compare
from toolkit.models.load import LoadedModel, load_model
from toolkit.models.sources import check_model_source, run_model_folder
from toolkit.runtime.rss import status_kib

CLEAR_REFS = Path("/proc/self/clear_refs")
CHILD = ("import json, sys\nfrom toolkit.evaluation.footprint import child_load\n"
         "print(json.dumps(child_load(sys.argv[1])))")
CHILD_SECONDS = 1800  # a large checkpoint on a slow disk
READY_TOKENS = 8  # tokens of the forward pass after the load (every weight read once)


@dataclass(frozen=True)
class Settings:
    """What :func:`measure` runs: device, batch sizes, prompt and new tokens per pass, repeats."""

    device: torch.device
    batches: tuple[int, ...] = (1, 8)
    prompt_tokens: int = 64
    new_tokens: int = 32
    repeats: int = 3


def check_folder(folder: str | Path) -> Path:
    """The model folder ``folder`` names (a run folder gives its ``model/``), checked before any weight is read.

    Raises :class:`ToolkitError` for a missing path, a file, a folder that is no checkpoint (no
    config.json, no ``*.safetensors``: pickle-only weights are refused) or a run that saved no model.
    """
    path = Path(folder).expanduser()
    if not path.exists():
        raise ToolkitError(f"{str(folder)!r} does not exist; give a saved model folder (a run folder, its model/ "
                           "or any Hugging Face checkpoint folder with *.safetensors)")
    if not path.is_dir():
        raise ToolkitError(f"{str(folder)!r} is a file; measure takes a saved model folder")
    path = run_model_folder(path) or path
    check_model_source(str(path))
    return path


def run_source(folder: Path) -> str | None:
    """The model a PruneLab run made ``folder`` (``<run>/model``) from, as its config.json names it; None otherwise."""
    run = folder.parent
    if run_model_folder(run) != folder:
        return None
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    return str(config["model"]) if config.get("model") else None


def check_baseline(name: str, *, from_run: bool) -> str:
    """``name`` checked as a model source; a run's recorded source that is gone says to give ``--baseline``."""
    try:
        check_model_source(name)
    except ToolkitError as exc:
        if not from_run:
            raise
        raise ToolkitError(f"the run's source model {name!r} cannot be found here ({exc}); give the dense source "
                           "with --baseline DIR") from None
    return name


def measure(folder: Path, baseline: str | None, settings: Settings) -> dict[str, Any]:
    """Measure the checked ``folder`` and, unless ``baseline`` is None, the dense source; plain data.

    ``result["models"]`` holds one entry per model (the folder first): name, label, dtype, parameters,
    bytes, load memory and ``speed`` (one :class:`~toolkit.evaluation.speed.Throughput` dict per batch
    size). Raises :class:`ToolkitError` when the two models' vocabularies differ.
    """
    check_speed_args(settings.batches, settings.new_tokens, settings.repeats, settings.prompt_tokens)
    entries, models = [], []
    for name in [str(folder)] + ([baseline] if baseline is not None else []):
        loaded, memory = load_measured(name, settings.device)
        entries.append({"name": name, "label": loaded.label, **_describe(loaded), "load": memory})
        models.append(loaded)
    sizes = {_vocab(m) for m in models}
    if len(sizes) > 1:
        raise ToolkitError(f"the model and the baseline do not share a vocabulary (sizes {sorted(sizes)}); give the "
                           "dense source it was made from as --baseline")
    prompt = prompt_ids(models[0], settings.prompt_tokens)
    speeds = compare([m.model for m in models], prompt, settings.device, batches=settings.batches,
                     new_tokens=settings.new_tokens, repeats=settings.repeats)
    for entry, speed in zip(entries, speeds, strict=True):
        entry["speed"] = [t.to_dict() for t in speed]
    return {"device": str(settings.device), "threads": torch.get_num_threads(), "batches": list(settings.batches),
            "prompt_tokens": len(prompt), "new_tokens": settings.new_tokens, "repeats": settings.repeats,
            "models": entries}


def prompt_ids(loaded: LoadedModel, tokens: int) -> list[int]:
    """``tokens`` ids of the fixed prompts (:data:`DEFAULT_PROMPTS` joined, repeated) in the model's tokenizer."""
    ids = encode_prompt(loaded.codec, " ".join(DEFAULT_PROMPTS))
    return (ids * (tokens // max(1, len(ids)) + 1))[:tokens]


def load_measured(name: str, device: torch.device) -> tuple[LoadedModel, dict[str, Any]]:
    """Load ``name`` (in its own dtype): the host's load memory from a fresh process, on CUDA the device's here."""
    memory: dict[str, Any] = {**host_load_memory(name), "device_mb": None}
    loaded = load_model(name)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        loaded.model.to(device)
        memory["device_mb"] = (torch.cuda.max_memory_allocated(device) - start) / 2**20
        loaded.model.to("cpu")  # compare() moves it again for its passes
    return loaded, memory


def _describe(loaded: LoadedModel) -> dict[str, Any]:
    """dtype, parameter count and bytes of a loaded model (bytes None where it was read from no folder)."""
    params = list(loaded.model.parameters())
    source = loaded.source if loaded.source is not None and loaded.source.is_dir() else None
    files = [f for f in source.rglob("*") if f.is_file()] if source is not None else []
    return {"dtype": str(params[0].dtype).removeprefix("torch."),
            "params": sum(p.numel() for p in {id(p): p for p in params}.values()),
            "bytes_on_disk": sum(f.stat().st_size for f in files if f.suffix == ".safetensors") if source else None,
            "folder_bytes": sum(f.stat().st_size for f in files) if source else None}


def _vocab(loaded: LoadedModel) -> int:
    model: Any = loaded.model  # a transformers PreTrainedModel
    return int(model.get_input_embeddings().weight.shape[0])


def host_load_memory(name: str) -> dict[str, Any]:
    """``{"host_peak_mb": MiB}`` of :func:`child_load` in a fresh interpreter; None and ``host_note`` when it failed."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                              timeout=CHILD_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"host_peak_mb": None, "host_note": f"the loading process failed: {type(exc).__name__}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"host_peak_mb": None, "host_note": f"the loading process failed: {last}"}
    return json.loads(lines[-1])


def child_load(name: str) -> dict[str, Any]:
    """In a fresh process: import the loaders, then load ``name`` measuring the peak resident memory it added."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 - imported before the measurement

    before = _reset_peak()
    loaded = load_model(name)
    peak = status_kib("VmHWM")
    with torch.no_grad():
        loaded.model(input_ids=torch.zeros(1, READY_TOKENS, dtype=torch.long))
    ready = status_kib("VmHWM")
    if before is None or peak is None or ready is None:
        return {"host_peak_mb": None, "host_ready_mb": None, "host_note": "no /proc/self/clear_refs here (Linux only)"}
    return {"host_peak_mb": (peak - before) / 1024, "host_ready_mb": (ready - before) / 1024}


def _reset_peak() -> int | None:
    """Reset this process's peak resident memory to the current one; the current (KiB), or None where Linux lacks it."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return None
    return status_kib("VmRSS")
