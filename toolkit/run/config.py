"""What a run is asked to do: :class:`RunConfig`, validated once at the edge, and its :class:`CancelToken`.

Every check here runs before any model loads or any file is written; none of them loads weights.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.data.text import SOURCES as TEXT_SOURCES
from toolkit.data.text import check_text_source
from toolkit.engine.options import CALIBRATE, DEVICES_AUTO, ERROR_MODES, FORWARD_DTYPES, FUSED, STORAGE_DTYPES
from toolkit.errors import ToolkitError
from toolkit.evaluation.tasks import AUTO, SOURCES, check_limit, parse_task_names
from toolkit.methods import get_method
from toolkit.models.embedded import is_embedded
from toolkit.models.sources import check_model_source
from toolkit.run.preflight import check_window
from toolkit.spec.allocation import Allocation, parse_allocation
from toolkit.spec.compression import Compression, QuantSpec, Unit, parse_compression
from toolkit.spec.refine import Refine, parse_refine
from toolkit.spec.targets import Structured, Target, Unstructured
from toolkit.store.runs import SCHEMA

DEVICE_NAME = re.compile(r"[a-z_]+(:\d+)?")  # cpu, cuda, cuda:1, mps (torch.device's syntax)


@dataclass(frozen=True)
class RunConfig:
    """One run: model, method, compression, calibration and evaluation protocol, engine options.

    ``sparsity``, ``quant`` and ``unit`` hold parsed objects (:class:`~toolkit.spec.targets.Target`,
    :class:`~toolkit.spec.compression.QuantSpec`, :class:`~toolkit.spec.compression.Unit`); the user's text (``"2:4"``,
    ``"int4:g128"``, ``"heads"``) is accepted and parsed once here. ``sparsity=None`` with a
    ``quant`` quantizes only. :attr:`compression` is the three as one spec. A spec the method cannot
    meet is refused here, before any model loads.
    """

    model: str = "smollm2-135m"
    dtype: str = "auto"  # the model on the host and saved: auto (the checkpoint's own) | float32 | bfloat16 | float16
    method: str = "wanda"
    sparsity: Target | None = Unstructured(0.5)
    quant: QuantSpec | None = None  # e.g. "int4" or "int3:g64"; None = no quantization
    unit: Unit | None = None  # structural unit of a block-scope method: heads | channels | heads+channels
    options: dict[str, Any] = field(default_factory=dict)  # the method's --set key=value
    calib: str = "wiki"
    nsamples: int = 32
    seqlen: int = 512
    seed: int = 0
    eval_data: str | None = "wiki"  # None: no evaluation
    eval_seqlen: int = 512
    eval_windows: int | None = None  # None: all windows
    eval_dense: bool = False
    device: str = "auto"
    propagate: str | None = None  # None: the method's default (see `python -m toolkit methods`)
    sequential: str | None = None  # None: the method's default
    batch_size: int = 8
    fused: str = "auto"  # sequential=group as one pass per layer: auto | on | off (same numbers, faster)
    error_windows: int = 4  # calibration windows behind the layer output error (see EngineConfig)
    error: str = "sample"  # the layer output error: sample (on error_windows windows) | none (not measured)
    calibrate: str = "auto"  # auto: a data-free method (magnitude, RTN) runs no calibration pass | always: it does
    devices: str = "auto"  # layers pruned concurrently on these devices, e.g. "cuda:0,cuda:1" (propagate=dense)
    forward_dtype: str = "auto"  # layer passes: auto (bf16 on GPUs, fp32 on CPUs) | fp32 | bf16; statistics float32
    distributed: bool = False  # layers solved on the ranks of a torchrun job (propagate=dense)
    dist_timeout: float = 1800.0  # seconds a rank waits for another before the run fails (--distributed)
    out_dir: str = "runs"
    save_model: bool = False
    stream: bool = False  # layers read one at a time from the checkpoint's shards, the result written as shards
    tasks: tuple[str, ...] = ()  # zero-shot tasks (lm-eval, 0 shots) scored dense and pruned; () = none
    task_limit: int | None = None  # the first N examples of each task; None = all
    task_data: str = AUTO  # auto | local | hub (see toolkit.evaluation.tasks.resolve_tasks)
    generate: bool = False  # greedy continuations of the fixed prompts, dense and pruned
    generate_tokens: int = 32  # new tokens per prompt of those continuations (toolkit.run.evals.GENERATION_TOKENS)
    encoding: str = "utf-8"  # of --calib / --eval text files
    threads: int | None = None  # intra-op CPU threads (None: torch's default); see toolkit.runtime.threads
    allocation: Allocation | str = "uniform"  # per-layer sparsity: uniform | owl[:M,λ] | FILE.json (spec/allocation.py)
    refine: Refine | str | None = None  # mask refinement after each linear's solve: dsnot[:N] (spec/refine.py)
    permute: bool = False  # n:m: each linear's inputs permuted so the important ones spread (methods/permute.py)

    def __post_init__(self) -> None:
        spec = get_method(self.method)
        compression = parse_compression(self.sparsity, self.quant, self.unit, permute=self.permute)
        for name in ("sparsity", "quant", "unit"):  # frozen: store the parsed objects
            object.__setattr__(self, name, getattr(compression, name))
        spec.check(compression)
        if self.save_model and self.quant is not None and not spec.saves(spec.make_config(self.options)):
            hint = ("add --set scale=shared (one input scale per group of linears, folded into the norm or linear "
                    "that feeds them)" if spec.savable is not None else "quantize with rtn, gptq, awp or awq")
            raise ToolkitError(f"{spec.name} results cannot be saved as a quantized checkpoint here: its weight "
                               f"Q(W·diag s)/s needs 1/s folded into the preceding op; {hint}, or drop --save-model")
        spec.check_config(compression, spec.make_config(self.options))
        if self.threads is not None and self.threads < 1:
            raise ToolkitError(f"--threads must be ≥ 1, got {self.threads}")
        if self.nsamples < 1:
            raise ToolkitError(f"--nsamples must be ≥ 1, got {self.nsamples}")
        check_window(self.seqlen, None, "--seqlen")
        check_window(self.eval_seqlen, self.eval_windows, "--eval-seqlen", "--eval-windows")
        self._check_sources()
        if self.generate_tokens < 1:
            raise ToolkitError(f"--generate-tokens must be ≥ 1, got {self.generate_tokens}")
        self._check_engine_choices()
        several = len(device_names(self.devices)) > 1
        if several and (self.propagate or spec.propagate) != "dense":
            raise ToolkitError("parallel layer pruning (--devices with several devices) needs --propagate dense")
        if self.dtype not in STORAGE_DTYPES:
            raise ToolkitError(f"unknown --dtype {self.dtype!r}: use one of {', '.join(STORAGE_DTYPES)}")
        if self.forward_dtype not in FORWARD_DTYPES:
            raise ToolkitError(f"forward-dtype must be one of {', '.join(FORWARD_DTYPES)}, got {self.forward_dtype!r}")
        self._check_distributed(spec, several)
        self._check_plan(spec)
        self._check_stream(spec)
        if self.uses_calibration():  # a data-free run reads no calibration text: an unused --calib is not refused
            check_text_source(self.calib, self.encoding)
        if self.eval_windows is not None and self.eval_windows < 1:
            raise ToolkitError("eval-windows must be ≥ 1 (leave it out for all windows)")
        self._check_tasks()

    def _check_sources(self) -> None:
        """Model and texts readable; local files kept as absolute paths (the run record is read from anywhere)."""
        check_model_source(self.model)
        if self.eval_data:
            check_text_source(self.eval_data, self.encoding)
        if not self.model.startswith("tiny-") and not is_embedded(self.model):
            object.__setattr__(self, "model", absolute_path(self.model))
        for name in ("calib", "eval_data"):
            object.__setattr__(self, name, absolute_path(getattr(self, name)))

    def _check_tasks(self) -> None:
        """Task names known (a "boolq,rte" string is accepted), limit ≥ 1 and only with tasks, source known."""
        if self.tasks:
            object.__setattr__(self, "tasks", tuple(parse_task_names(self.tasks)))
        elif self.task_limit is not None:
            raise ToolkitError("--task-limit counts examples per zero-shot task: give --tasks too")
        check_limit(self.task_limit, "--task-limit")
        if self.task_data not in SOURCES:
            raise ToolkitError(f"unknown task data source {self.task_data!r}: use one of {', '.join(SOURCES)}")

    def uses_calibration(self) -> bool:
        """Whether the run reads calibration text: not a data-free method in memory (toolkit/engine/data_free.py)."""
        from toolkit.engine.data_free import needs_calibration  # torch: only once a config is checked
        from toolkit.engine.state import EngineConfig

        engine = EngineConfig(allocation=parse_allocation(self.allocation), refine=parse_refine(self.refine),
                              calibrate=self.calibrate, distributed=self.distributed)
        return self.stream or needs_calibration(get_method(self.method), self.compression, engine)

    def _check_engine_choices(self) -> None:
        """--fused, --error-windows, --error and --calibrate among their values (one line each)."""
        if self.fused not in FUSED or self.error_windows < 1:
            raise ToolkitError(f"fused must be one of {', '.join(FUSED)} and error-windows ≥ 1")
        if self.error not in ERROR_MODES:
            raise ToolkitError(f"unknown --error {self.error!r}: use one of {', '.join(ERROR_MODES)}")
        if self.calibrate not in CALIBRATE:
            raise ToolkitError(f"unknown --calibrate {self.calibrate!r}: use one of {', '.join(CALIBRATE)}")

    def _check_plan(self, spec: Any) -> None:
        """--allocation and --refine parsed, and refused where they have nothing to act on (one line each)."""
        allocation, refine = parse_allocation(self.allocation), parse_refine(self.refine)
        object.__setattr__(self, "allocation", allocation)  # frozen: store the parsed objects
        object.__setattr__(self, "refine", refine)
        linear = spec.scope.value == "linear"
        if not allocation.uniform:
            if not linear:
                raise ToolkitError(f"--allocation {allocation.label} spreads sparsity over the layers for linear-scope "
                                   f"methods; {spec.name} plans its own per-layer removal: drop --allocation")
            if Unstructured not in spec.targets:
                raise ToolkitError(f"--allocation {allocation.label} spreads a sparsity over the layers; {spec.name} "
                                   "quantizes only and prunes nothing: drop --allocation (it spreads the sparsity of "
                                   "pruning methods such as wanda or sparsegpt)")
            if not isinstance(self.sparsity, Unstructured):
                what = "there is no sparsity (quantize only)" if self.sparsity is None else \
                    f"{self.sparsity} fixes the count of every group of weights"
                raise ToolkitError(f"--allocation {allocation.label} spreads an unstructured sparsity over the layers; "
                                   f"{what}: give --sparsity P% or drop --allocation")
            if self.stream and allocation.kind == "owl":
                raise ToolkitError("--allocation owl scores every layer of the dense model before pruning, which "
                                   "--stream cannot hold: save its ratios with a first in-memory run (result.json "
                                   "allocation.ratios) and give them as --allocation FILE.json")
        if refine is not None:
            if not linear or self.sparsity is None or isinstance(self.sparsity, Structured):
                raise ToolkitError(f"--refine {refine.label} swaps weights inside the masks of unstructured or n:m "
                                   f"sparsity; {spec.name} at {self.compression.label} has none: drop --refine")
            if self.quant is not None:
                raise ToolkitError(f"--refine {refine.label} refines sparsity masks; with --quant the codes would no "
                                   "longer match: drop --refine or --quant")
            if self.permute:
                raise ToolkitError(f"--refine {refine.label} swaps weights inside the n:m groups of the stored order, "
                                   "--permute chooses them in a permuted order: drop one of them")
        if self.permute and not linear:
            raise ToolkitError(f"--permute reorders the inputs of single linears for n:m; {spec.name} removes whole "
                               "units of a layer: drop --permute or use a linear-scope method")

    def _check_stream(self, spec: Any) -> None:
        """--stream: a local checkpoint folder, a linear-scope method, a savable quantization, perplexity only."""
        if not self.stream:
            return
        if self.model.endswith(".gguf") or not Path(self.model).expanduser().is_dir():
            raise ToolkitError(f"--stream reads the weights layer by layer from a local safetensors checkpoint folder; "
                               f"{self.model!r} is not one (save it with save_pretrained, or drop --stream)")
        if spec.scope.value != "linear":
            raise ToolkitError(f"--stream runs linear-scope methods; {spec.name} changes the layers' shapes: "
                               "drop --stream")
        if self.quant is not None and not spec.saves_quant:
            raise ToolkitError(f"--stream writes the checkpoint as it goes, and {spec.name} results cannot be saved as "
                               "a quantized checkpoint (1/s must be folded into the preceding op): quantize with rtn, "
                               "gptq or awp, or drop --stream")
        if self.distributed:
            raise ToolkitError("--stream and --distributed exclude each other")
        if self.tasks or self.generate:
            raise ToolkitError("--stream evaluates perplexity layer by layer; zero-shot tasks and generations need the "
                               "whole model: drop --tasks/--generate, then run them on RUN_DIR/model in memory")
        object.__setattr__(self, "save_model", True)  # the streamed layers exist only in the written checkpoint

    def _check_distributed(self, spec: Any, several_devices: bool) -> None:
        if not self.distributed:
            return
        if (self.propagate or spec.propagate) != "dense":
            raise ToolkitError("--distributed needs --propagate dense (with pruned inputs a layer waits for the last)")
        if spec.scope.value != "linear":
            raise ToolkitError(f"--distributed runs linear-scope methods; {spec.name} prunes whole blocks")
        if several_devices:
            raise ToolkitError("--distributed and --devices with several devices exclude each other: one device a rank")
        if not 0 < self.dist_timeout < math.inf:
            raise ToolkitError(f"--dist-timeout must be > 0 seconds, got {self.dist_timeout}")

    def _allocation(self) -> Allocation:
        """The parsed allocation (a str only before __post_init__)."""
        return parse_allocation(self.allocation)

    def _refine_label(self) -> str | None:
        """The refinement's label, or None."""
        refine = parse_refine(self.refine)
        return None if refine is None else refine.label

    def fit_quant_group(self, widths: Collection[int]) -> tuple[RunConfig, str]:
        """The config with a group given by no one fitted to the model, and a note when it shrank ("" if not).

        ``widths`` are the input widths of the model's quantized (decoder) linears. ``int4`` runs groups
        of 128 where 128 divides every width, else of the first of 64, 32, … that does
        (:meth:`~toolkit.spec.compression.QuantSpec.fit_group`; SmolLM2-135M's 576: 64), so the checkpoint
        can be saved; a given group (``int4:g128``) is kept.
        """
        quant = self.quant
        fitted = None if quant is None else quant.fit_group(widths)
        if quant is None or fitted is None or fitted == quant:
            return self, ""
        return dataclasses.replace(self, quant=fitted), quant.fit_note(fitted, widths)

    @property
    def compression(self) -> Compression:
        """Sparsity, quantization and unit as one spec."""
        return Compression(self.sparsity, self.quant, self.unit, self.permute)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (config.json, schema 2).

        The compression fields as their labels, plus ``compression`` as data (label, kind, sparsity, quant,
        unit) and ``schema``.
        """
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(sparsity=None if self.sparsity is None else str(self.sparsity),
                    quant=None if self.quant is None else self.quant.label,
                    unit=None if self.unit is None else self.unit.value,
                    options=dict(self.options), compression=self.compression.to_dict(), schema=SCHEMA,
                    tasks=list(self.tasks), allocation=self._allocation().label, refine=self._refine_label(),
                    cwd=os.getcwd())  # where the run started: what a relative path in an older record was relative to
        if self.quant is not None and self.quant.auto_group:  # given without a group: the run fitted ``quant``
            data["quant_asked"] = self.quant.asked
        return data

    def reuse_key(self) -> dict[str, Any]:
        """The fields that make two runs the same experiment (for sweep reuse).

        A schema-1 run, which has no ``quant``/``unit``, matches when they are None; a run without
        zero-shot tasks matches runs recorded before tasks existed.
        """
        data = self.to_dict()
        if "quant_asked" in data:  # the group is fitted to the model, which the key names: match what was asked
            data.pop("quant")
        for volatile in ("out_dir", "save_model", "device", "batch_size", "eval_dense", "fused", "error_windows",
                         "error", "calibrate", "devices", "compression", "schema", "generate", "generate_tokens",
                         "threads", "distributed", "dist_timeout", "stream", "cwd"):
            data.pop(volatile)
        if not self.tasks:
            for name in ("tasks", "task_limit", "task_data"):
                data.pop(name)
        if self.encoding == "utf-8":  # the default: runs from before the field existed match
            data.pop("encoding")
        if data["forward_dtype"] == "fp32" or (data["forward_dtype"] == "auto" and not _cuda()):
            data.pop("forward_dtype")  # float32 passes: runs from before the option ran in float32
        if data["dtype"] == "auto":  # the checkpoint's own: runs from before the option loaded it so (or float32)
            data.pop("dtype")
        if data["allocation"] == "uniform":  # the default: runs from before the option were uniform
            data.pop("allocation")
        if data["refine"] is None:
            data.pop("refine")
        if not data["permute"]:  # the default: runs from before the option were not permuted
            data.pop("permute")
        return data


def absolute_path(source: str | None) -> str | None:
    """``source`` as an absolute path when it names a local file or folder (``calib.txt``); otherwise unchanged.

    Dataset and model names (``wiki``, ``tiny-llama``, a hub id) are left alone, so a run can be recovered or
    reused from any working directory.
    """
    if not source or source in TEXT_SOURCES or not Path(source).expanduser().exists():
        return source
    return os.path.abspath(Path(source).expanduser())


def recorded_source(source: str, cwd: object, what: str, run_id: str) -> str:
    """A text source read back from a run record, made absolute; one line when a relative file cannot be found.

    Records name local files absolutely (:func:`absolute_path`); an older record's relative path is
    resolved against the working directory it recorded (``cwd``), or, when it recorded none, against
    the current one. ``what`` names the source in the message ("calibration text").
    """
    path = Path(source).expanduser()
    if source in TEXT_SOURCES or path.is_absolute():
        return source
    if isinstance(cwd, str) and cwd:
        candidate = Path(cwd) / path
        if not candidate.exists():
            raise ToolkitError(f"run {run_id}'s {what} {source!r} was read from {cwd!r}, where the run started, and "
                               f"{str(candidate)!r} no longer exists: put the file back there")
        return str(candidate)
    if not path.exists():
        raise ToolkitError(f"run {run_id}'s {what} is {source!r}, a path relative to the folder the run started in, "
                           f"which its record does not name, and it is not in {os.getcwd()!r}: run this command "
                           "from the folder the run was started in")
    return os.path.abspath(path)


def device_names(text: str) -> list[str]:
    """The device names of a ``--devices`` list (``cuda:0,cuda:1``; ``auto`` → []), checked without torch.

    Raises :class:`ToolkitError` for an empty entry (``gpu0,,cpu``) or a name that is not ``type`` or
    ``type:index`` (``gpu0``); whether the devices exist is checked once torch is loaded, before the run
    is recorded (:func:`toolkit.engine.parallel.resolve_devices`).
    """
    if text == DEVICES_AUTO:
        return []
    names = [name.strip() for name in text.split(",")]
    if "" in names:
        raise ToolkitError(f"--devices {text!r} has an empty entry; give a comma list such as cuda:0,cuda:1 "
                           "(or leave it at auto)")
    for name in names:
        if not DEVICE_NAME.fullmatch(name):
            raise ToolkitError(f"--devices {text}: {name!r} is not a device name; use cpu, cuda or cuda:N, "
                               "e.g. cuda:0,cuda:1")
    return names


def _cuda() -> bool:
    """Whether ``forward_dtype=auto`` resolves to bf16 here (a CUDA device); torch is imported only when asked."""
    import torch

    return bool(torch.cuda.is_available())


class CancelToken:
    """Set from any thread; the engine checks it at every linear, solver round and batch."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the run to stop at its next cancellation point."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()
