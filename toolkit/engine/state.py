"""What the steps of one engine run share: its options, its sinks, its journal and its records.

:class:`EngineConfig` is how the engine drives a run; :class:`RunState` is the state passed from
the driver (:mod:`toolkit.engine.linear`) to the statistics passes (:mod:`toolkit.engine.gather`) and the
per-linear solve (:mod:`toolkit.engine.solve`); :class:`EngineResult` is what a run measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.options import CALIBRATE, DEVICES_AUTO, ERROR_MODES, FORWARD_DTYPES, FUSED, PROPAGATE, SEQUENTIAL
from toolkit.engine.phases import PhaseTimer
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import Event
from toolkit.methods.base import MethodSpec, Stat
from toolkit.methods.quant_grid import QuantState
from toolkit.models.fold import foldable
from toolkit.spec.allocation import Allocation
from toolkit.spec.compression import Compression, QuantSpec
from toolkit.spec.refine import Refine
from toolkit.spec.targets import Target, Unstructured

LinearKey = tuple[int, str]  # (decoder layer, qualified linear name inside it)
MaskSink = Callable[[int, str, Tensor], None]  # (layer, name, keep_mask (out, in) bool on the CPU)
QuantSink = Callable[[int, str, QuantState], None]  # (layer, name, quantization state on the CPU)
StructureSink = Callable[[dict[str, Any]], None]  # one structure change (block scope), plain data


JOURNAL_BUDGET_MB = 512  # the journal's in-memory budget for models with small decoder layers


def journal_budget_bytes(cfg: EngineConfig, large_layers: bool) -> int:
    """The undo journal's in-memory budget: ``cfg.journal_budget_mb``, else 0 for large layers, else 512 MiB.

    A large layer's backups (a 7B's: 386 MiB of bfloat16 a layer) would sit beside the layer's float32
    copy and the solve's temporaries at the host peak; on disk they cost one write each, which a model
    above the budget paid for all but its first 512 MiB anyway.
    """
    if cfg.journal_budget_mb is not None:
        return cfg.journal_budget_mb * 2**20
    return 0 if large_layers else JOURNAL_BUDGET_MB * 2**20


def ignore(*args: Any) -> None:
    """A sink that drops what it gets."""


@dataclass(frozen=True)
class EngineConfig:
    """How the engine drives a run (the method's own options live in its config)."""

    propagate: str | None = None  # "pruned" | "dense" (layer i+1's inputs); None = the method's default
    sequential: str | None = None  # "group" | "layer"; None = the method's reference setting
    batch_size: int = 8  # calibration windows per forward pass (the multi-pass path)
    device: str = "auto"  # "auto" = cuda when available, else cpu
    restore_on_failure: bool = True
    fused: str = "auto"  # "auto" | "on" | "off": sequential=group in ONE pass per layer (see gather.fused_pass)
    fused_budget_mb: int = 4096  # "auto" fuses when the layer's activations for all windows fit in this
    error_windows: int = 4  # windows behind the layer output error (all where the passes keep every dense output)
    # and behind the Gram of methods that need only column norms (Wanda): their rel_error is a sample
    error: str = "sample"  # "sample" | "none": the layer output error measured, or not (no pass runs for it)
    calibrate: str = "auto"  # "auto": a data-free method computes no input (engine/data_free.py); "always": it does
    devices: str = DEVICES_AUTO  # layers pruned concurrently on these (needs propagate=dense); see parallel.py
    forward_dtype: str = "auto"  # "auto" | "fp32" | "bf16": the layers' passes (auto: bf16 on GPUs; stats float32)
    distributed: bool = False  # layers solved on the ranks of torch.distributed (see dist_engine.py)
    journal_budget_mb: int | None = None  # backups of the undo journal kept in memory; beyond, on disk (writeback.py);
    # None: JOURNAL_BUDGET_MB, or 0 for decoder layers above KEEP_FREED_MAX_LAYER_BYTES (a 7B's: every backup on disk)
    allocation: Allocation = field(default_factory=Allocation)  # per-layer ratios (plan phase, engine/allocation.py)
    refine: Refine | None = None  # mask refinement after each linear's solve (DSnoT), None = the method's mask

    def __post_init__(self) -> None:
        if self.propagate is not None and self.propagate not in PROPAGATE:
            raise ToolkitError(f"propagate must be one of {PROPAGATE}, got {self.propagate!r}")
        if self.sequential is not None and self.sequential not in SEQUENTIAL:
            raise ToolkitError(f"sequential must be one of {SEQUENTIAL}, got {self.sequential!r}")
        if self.batch_size < 1:
            raise ToolkitError("batch_size must be ≥ 1")
        if self.fused not in FUSED:
            raise ToolkitError(f"fused must be one of {FUSED}, got {self.fused!r}")
        if self.forward_dtype not in FORWARD_DTYPES:
            raise ToolkitError(f"forward_dtype must be one of {FORWARD_DTYPES}, got {self.forward_dtype!r}")
        if self.error_windows < 1 or self.fused_budget_mb < 0 or (self.journal_budget_mb or 0) < 0:
            raise ToolkitError("error_windows must be ≥ 1, fused_budget_mb and journal_budget_mb ≥ 0")
        if self.error not in ERROR_MODES:
            raise ToolkitError(f"error must be one of {ERROR_MODES}, got {self.error!r}")
        if self.calibrate not in CALIBRATE:
            raise ToolkitError(f"calibrate must be one of {CALIBRATE}, got {self.calibrate!r}")


@dataclass
class EngineResult:
    """What the engine measured.

    Per-linear records, weights kept per linear (from the keep-masks), the grids of the quantized linears,
    pruning seconds.
    """

    layers: list[dict] = field(default_factory=list)
    kept: dict[LinearKey, int] = field(default_factory=dict)
    sizes: dict[LinearKey, int] = field(default_factory=dict)  # weights of each pruned linear
    quant: dict[LinearKey, QuantSpec] = field(default_factory=dict)
    seconds: float = 0.0
    remote_gpu_peak_mb: float | None = None  # the highest GPU memory peak of the other ranks (distributed)
    phases: list[dict[str, float]] = field(default_factory=list)  # seconds per phase, one record per layer
    precision: dict[str, str] = field(default_factory=dict)  # dtype of storage, forward passes, statistics, solves
    allocation: dict[str, Any] = field(default_factory=dict)  # the plan: kind, per-layer ratios (and OWL's LODs)
    layer_errors: dict[int, float | None] = field(default_factory=dict)  # LayerDone's error per layer (None: none)
    error_windows: int | None = None  # the most calibration windows a layer's output error covered (None: none)

    @property
    def achieved_sparsity(self) -> float:
        """Fraction of weights the keep-masks drop, over all pruned linears (never from exact zeros)."""
        total = sum(self.sizes.values())
        return 1.0 - sum(self.kept.values()) / total if total else 0.0

    def merge(self, other: EngineResult) -> None:
        """Add ``other``'s records (a parallel worker's); records are re-sorted by layer."""
        self.layers.extend(other.layers)
        self.layers.sort(key=lambda record: record["layer"])  # stable: linears keep their order
        self.kept.update(other.kept)
        self.sizes.update(other.sizes)
        self.quant.update(other.quant)
        self.phases.extend(other.phases)
        self.layer_errors.update(other.layer_errors)
        self.error_windows = max((w for w in (self.error_windows, other.error_windows) if w is not None), default=None)
        self.phases.sort(key=lambda record: record["layer"])
        peaks = [p for p in (self.remote_gpu_peak_mb, other.remote_gpu_peak_mb) if p is not None]
        self.remote_gpu_peak_mb = max(peaks) if peaks else None


@dataclass
class RunState:
    """The state shared by the steps of one engine run (a parallel worker gets its own copy)."""

    spec: MethodSpec
    compression: Compression
    method_cfg: object
    cfg: EngineConfig
    device: torch.device
    emit: Callable[[Event], None]
    cancelled: Callable[[], bool]
    writeback: WriteBack
    on_mask: MaskSink = ignore
    on_quant: QuantSink = ignore
    result: EngineResult = field(default_factory=EngineResult)
    layer: int = 0  # the decoder layer being pruned
    fused: bool = False  # one pass per layer over all windows as a single batch
    gram_limit: int | None = None  # tokens behind G* for methods that need only column norms
    forward_dtype: torch.dtype | None = None  # autocast dtype of the layer passes (None: no autocast)
    layer_dtype: torch.dtype | None = None  # the dtype a layer is held in on the device (None: as stored)
    storage_dtype: torch.dtype | None = None  # the model's dtype on the host (journal backups are kept in it)
    timer: PhaseTimer = field(default_factory=PhaseTimer)  # seconds per phase of the current layer
    layer_sparsity: tuple[float, ...] | None = None  # the plan's ratio of every layer (None: the run's target)
    # the current layer's quantization states while a run folds input scales (AWQ scale=shared; engine/fold.py)
    layer_states: dict[str, QuantState] = field(default_factory=dict)
    # the layer's module and linears while it is pruned (None otherwise): where a group's input comes from
    layer_module: nn.Module | None = None
    layer_linears: dict[str, nn.Module] = field(default_factory=dict)

    @property
    def fold(self) -> bool:
        """Whether this run folds each group's shared input scale into what feeds the group (AWQ scale=shared)."""
        return self.spec.folds(self.method_cfg)

    def foldable(self, group: list[str]) -> bool:
        """Whether a scale shared by ``group`` of the current layer can be folded (toolkit/models/fold.py)."""
        return self.layer_module is not None and foldable(self.layer_module, self.layer_linears, group)

    @property
    def target(self) -> Target | None:
        """The sparsity target of the current layer's linears (None when only quantizing).

        The run's target, or ``Unstructured(s_l)`` of the plan phase's allocation (engine/allocation.py).
        """
        if self.layer_sparsity is not None:
            return Unstructured(self.layer_sparsity[self.layer])
        return self.compression.sparsity

    @property
    def quant(self) -> QuantSpec | None:
        """The quantization grid every linear gets (None when only pruning)."""
        return self.compression.quant

    @property
    def sequential(self) -> str:
        """The statistics grouping (``group`` | ``layer``): the run's setting, else the method's default."""
        return self.cfg.sequential or self.spec.sequential

    @property
    def propagate(self) -> str:
        """Layer i+1's inputs (``pruned`` | ``dense``): the run's setting, else the method's default."""
        return self.cfg.propagate or self.spec.propagate

    @property
    def measures_error(self) -> bool:
        """Whether the layer output error is measured (``EngineConfig.error`` is not ``none``)."""
        return self.cfg.error != "none"

    @property
    def needs_cross(self) -> bool:
        """True when the method asks for :attr:`Stat.CROSS` or :attr:`Stat.DENSE_GRAM` (a dense copy's inputs)."""
        return Stat.CROSS in self.spec.needs or Stat.DENSE_GRAM in self.spec.needs

    def check_cancel(self) -> None:
        """A cancellation point."""
        if self.cancelled():
            raise RunCancelled("cancelled")
