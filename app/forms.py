"""What the Run and Sweep forms hold, as plain dataclasses, and how they become a RunConfig.

Everything here is a pure function of the form values (no Gradio), so the tests exercise the same
validation the page uses. Every user mistake is a :class:`ToolkitError` whose message says what
to change; the page shows it as a message, never a traceback. The form's choices become the
typed compression spec here (:func:`sparsity_target`, :func:`quant_spec`, :func:`unit_choice`):
the :class:`RunConfig` it builds holds objects, never text to be parsed again.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import allocation_form
from app.allocation_form import AllocationSettings
from toolkit.api import RunConfig, list_methods
from toolkit.errors import ToolkitError
from toolkit.evaluation.tasks import DEFAULT_TASKS, parse_task_names
from toolkit.models.embedded import EMBEDDED_MODELS
from toolkit.run.protocols import PROTOCOLS, QUICK
from toolkit.runtime.threads import pick_threads
from toolkit.spec.compression import QuantSpec, Unit, parse_unit
from toolkit.spec.targets import NM, Structured, Target, Unstructured, parse_sparsity

MODELS = (*EMBEDDED_MODELS, "tiny-llama", "tiny-opt", "tiny-gpt2", "tiny-qwen2", "tiny-gemma3")
EMBEDDED_NOTE = "; ".join(f"{m.name} ({m.licence})" for m in EMBEDDED_MODELS.values()) + " are embedded"
CALIB_SOURCES = ("wiki", "wikitext2", "c4", "ptb")
PATTERNS = {"unstructured": "unstructured", "nm": "n:m", "structured": "structured"}  # target kind → label
NO_SPARSITY = "none"  # the pattern label of a quantize-only run (offered for methods that quantize)
NM_CHOICES = ("2:4", "4:8", "1:4", "8:16")
PERMUTE_LABEL = "Permute inputs (n:m)"  # the box of --permute (app/page_words.py names it)
QUANT_BITS = {"int8": 8, "int4": 4, "int3": 3, "int2": 2}  # the quantization dropdown (beside "none")
QUANT_CHOICES = ("none", *QUANT_BITS)
GROUP_SIZES = (("128", 128), ("64", 64), ("32", 32), ("per row", 0))  # (label, inputs per scale)
TASK_CHOICES = DEFAULT_TASKS  # the seven tasks of the seed papers
SWEEP_SPARSITIES = ("none", "10%", "20%", "30%", "40%", "50%", "60%", "70%", "2:4", "4:8")  # none: quantize only
SWEEP_BITS = ("none", "int8", "int4", "int3", "int2")  # none: no quantization; g128 groups
# label → (nsamples, seqlen, eval seqlen, eval windows (0 = all)): the named protocols the CLI's --protocol takes
PRESETS = {p.label: (p.nsamples, p.seqlen, p.eval_seqlen, p.eval_windows or 0) for p in PROTOCOLS.values()}


@dataclass
class Protocol:
    """Calibration and evaluation settings shared by the Run and Sweep forms."""

    calib: str = "wiki"
    nsamples: int = QUICK.nsamples
    seqlen: int = QUICK.seqlen
    seed: int = 0
    evaluate: bool = True
    eval_data: str = "wiki"
    eval_seqlen: int = QUICK.eval_seqlen
    eval_windows: int = QUICK.eval_windows or 0  # 0 = all windows
    device: str = "auto"
    tasks: list[str] = field(default_factory=list)  # zero-shot tasks scored dense and pruned; [] = none
    task_limit: int = 20  # examples per task; 0 = all


@dataclass
class RunSettings:
    """The Run form: model, method, its options, sparsity, protocol, outputs."""

    model: str = "smollm2-135m"
    model_path: str = ""  # a hub id or local path; overrides ``model`` when given
    method: str = "wanda"
    pattern: str = "unstructured"  # unstructured | n:m | structured | none
    percent: float = 50.0
    nm: str = "2:4"
    permute: bool = False  # n:m: each linear's inputs permuted so the important ones spread (--permute)
    quant: str = "none"  # none | int8 | int4 | int3 | int2
    group_size: int = 128  # inputs per quantization scale; 0 = one group per row
    unit: str = ""  # heads | channels | heads+channels for a block-scope method; "" = none
    options: dict[str, Any] = field(default_factory=dict)  # option inputs of the chosen method
    extra_options: str = ""  # key=value lines, override the inputs
    protocol: Protocol = field(default_factory=Protocol)
    eval_dense: bool = True
    save_model: bool = False
    generate: bool = False  # greedy continuations of the fixed prompts, dense and pruned
    allocation: AllocationSettings = field(default_factory=AllocationSettings)  # per-layer sparsity, DSnoT


def method_table() -> dict[str, dict[str, Any]]:
    """``name → list_methods() entry`` in registry order."""
    return {m["name"]: m for m in list_methods()}


def quantizes(method: str) -> bool:
    """True when ``method`` produces a quantization state (the form then offers the quant choice)."""
    return "quant" in method_table().get(method, {}).get("produces", ())


def units(method: str) -> list[str]:
    """The structural units a block-scope ``method`` removes (empty for linear-scope methods)."""
    return list(method_table().get(method, {}).get("units", ()))


def pattern_labels(method: str) -> list[str]:
    """The sparsity patterns ``method`` supports, as form labels (plus "none" when it quantizes)."""
    entry = method_table().get(method)
    if entry is None:
        return list(PATTERNS.values())
    labels = [PATTERNS[p] for p in entry["patterns"] if p in PATTERNS]
    return labels + ([NO_SPARSITY] if quantizes(method) else [])


def takes_permute(method: str) -> bool:
    """Whether ``method`` takes ``--permute`` (a linear-scope method with n:m sparsity; ``list_methods``)."""
    return bool(method_table().get(method, {}).get("permute", False))


def offers_permute(method: str, pattern: str) -> bool:
    """Whether the form's "Permute inputs" box is enabled: an n:m pattern with a method that takes it.

    The box only mirrors the rule; a run asked with it otherwise is refused by :class:`RunConfig` with the
    command line's message.
    """
    return shows_nm(pattern) and takes_permute(method)


def shows_percent(pattern: str) -> bool:
    """Whether the sparsity slider applies to the pattern label (unstructured, structured)."""
    return pattern in (PATTERNS["unstructured"], PATTERNS["structured"])


def shows_nm(pattern: str) -> bool:
    """Whether the n:m choice applies to the pattern label."""
    return pattern == PATTERNS["nm"]


def sparsity_target(pattern: str, percent: float, nm: str) -> Target | None:
    """The target of the form's pattern, slider and n:m choice (None for the "none" pattern)."""
    if pattern == NO_SPARSITY:
        return None
    if shows_nm(pattern):
        text = (nm or "").strip()
        if not text:
            raise ToolkitError("pick an n:m pattern such as 2:4")
        target = parse_sparsity(text)
        if not isinstance(target, NM):
            raise ToolkitError(f"{text!r} is not an n:m pattern: write e.g. 2:4")
        return target
    try:
        value = float(percent)
    except (TypeError, ValueError):
        raise ToolkitError(f"sparsity must be a number of percent, got {percent!r}") from None
    if not math.isfinite(value) or not 0 <= value < 100:
        raise ToolkitError(f"sparsity {value}% is outside [0, 100): pick e.g. 50")
    if pattern == PATTERNS["structured"]:
        return Structured(value / 100.0)
    if pattern != PATTERNS["unstructured"]:
        raise ToolkitError(f"unknown sparsity pattern {pattern!r}: pick one of {', '.join(PATTERNS.values())}")
    return Unstructured(value / 100.0)


def quant_spec(quant: str, group_size: Any) -> QuantSpec | None:
    """The quantization grid of the form's dropdowns (None for "none")."""
    choice = (quant or "none").strip().lower()
    if choice == "none":
        return None
    if choice not in QUANT_BITS:
        raise ToolkitError(f"unknown quantization {quant!r}: pick one of {', '.join(QUANT_CHOICES)}")
    return QuantSpec(bits=QUANT_BITS[choice], group_size=_int(group_size if group_size is not None else 128,
                                                                 "group size", 0))


def unit_choice(method: str, unit: str) -> Unit | None:
    """The structural unit, only for a method that removes units (the dropdown is hidden otherwise)."""
    return parse_unit(unit) if units(method) else None


def parse_extra_options(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` comments skipped) → dict of strings."""
    options = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ToolkitError(f"extra options line {number}: write key=value, got {line!r}")
        options[key.strip()] = value.strip()
    return options


def changed_options(method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The option values of ``method`` that differ from its defaults (ints kept as ints)."""
    entry = method_table().get(method, {"options": []})
    changed = {}
    for option in entry["options"]:
        name = option["name"]
        if name not in values or values[name] is None:
            continue
        value = values[name]
        if option["type"] == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if value != option["default"]:
            changed[name] = value
    return changed


def _int(value: Any, name: str, low: int) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolkitError(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer() or number < low:
        raise ToolkitError(f"{name} must be a whole number ≥ {low}, got {value!r}")
    return int(number)


def model_name(model: str, model_path: str) -> str:
    """The model to load: the free-text field when filled, else the dropdown."""
    name = (model_path or "").strip() or (model or "").strip()
    if not name:
        raise ToolkitError("no model given: pick one from the list or type a hub id or a local path")
    return name


def check_model_available(name: str) -> None:
    """Raise before a run is queued when the hub id ``name`` cannot be loaded; nothing else is checked here.

    :class:`RunConfig` already checked what the files tell (a local folder, a ``.gguf``, the list's
    names). A hub id passes when the local Hugging Face cache holds it; otherwise the hub must be
    reachable (one quick connect) and know the id (one request). Raises :class:`ToolkitError` saying
    what to pick instead, with the nearest name of the list when the id looks like a typo of one.
    """
    from toolkit.models.sources import hub_reachable

    if name in MODELS or Path(name).expanduser().exists() or _hub_cached(name):
        return
    near = difflib.get_close_matches(name, MODELS, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    if not hub_reachable():
        raise ToolkitError(f"model {name!r} is not in the list, not a local folder or file, and as a Hugging Face hub "
                           "id it needs the hub, which is not reachable (and it is not in the local cache): pick a "
                           f"model from the list, or type a checkpoint folder or a .gguf file{hint}")
    if not _on_hub(name):
        raise ToolkitError(f"there is no model {name!r} on the Hugging Face hub: check the id (e.g. "
                           f"facebook/opt-125m), or pick a model from the list{hint}")


def _hub_cached(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid repository id: RunConfig's source check words that case
        return False


def _on_hub(name: str) -> bool:
    """Whether the hub knows ``name`` (True when it could not say: the load then reports what went wrong)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi().model_info(name, timeout=10)
    except GatedRepoError:  # it exists; the load says that it needs a token
        return True
    except RepositoryNotFoundError:
        return False
    except (HfHubHTTPError, OSError, ValueError):
        return True
    return True


def protocol_fields(protocol: Protocol) -> dict[str, Any]:
    """RunConfig keyword arguments of the protocol, validated."""
    calib = (protocol.calib or "").strip()
    if not calib:
        raise ToolkitError("pick a calibration source (wiki is embedded)")
    windows = _int(protocol.eval_windows or 0, "eval windows", 0)
    return {
        "calib": calib, "nsamples": _int(protocol.nsamples, "nsamples", 1),
        "seqlen": _int(protocol.seqlen, "seqlen", 2),
        "seed": _int(protocol.seed, "seed", 0),
        "eval_data": (protocol.eval_data or "wiki").strip() if protocol.evaluate else None,
        "eval_seqlen": _int(protocol.eval_seqlen, "eval seqlen", 2), "eval_windows": windows or None,
        "device": (protocol.device or "auto").strip(),
        "tasks": tuple(parse_task_names(protocol.tasks)) if protocol.tasks else (),
        "task_limit": (_int(protocol.task_limit or 0, "examples per task", 0) or None) if protocol.tasks else None,
        "threads": pick_threads(serving=True),  # one core left for the server and the browser
    }


def to_config(settings: RunSettings, runs_dir: str) -> RunConfig:
    """Validate the form into a :class:`RunConfig`; raises :class:`ToolkitError` saying what to fix.

    A custom allocation table's ratio file is written under ``runs_dir`` once the config is accepted
    (:mod:`app.allocation_form`).
    """
    if not settings.method:
        raise ToolkitError("pick a method")
    options = changed_options(settings.method, settings.options)
    options.update(parse_extra_options(settings.extra_options))
    target = sparsity_target(settings.pattern, settings.percent, settings.nm)
    config = RunConfig(
        model=model_name(settings.model, settings.model_path), method=settings.method,
        sparsity=target,
        quant=quant_spec(settings.quant, settings.group_size), unit=unit_choice(settings.method, settings.unit),
        options=options, **allocation_form.config_fields(settings.allocation, target, runs_dir),
        **protocol_fields(settings.protocol), eval_dense=bool(settings.eval_dense),
        out_dir=runs_dir, save_model=bool(settings.save_model), generate=bool(settings.generate),
        permute=bool(settings.permute),
    )
    allocation_form.write_ratio_file(config.allocation)
    return config
