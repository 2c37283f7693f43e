"""Typed, JSON-serialisable events: the spine every UI and the run store consume (CONTRIBUTING.md R6).

Each kind is a frozen dataclass holding plain data (str, int, float, lists, dicts) and never a
tensor. ``to_dict`` adds a ``"type"`` tag so a run's ``events.jsonl`` can be replayed with
:func:`event_from_dict`. ``nan`` stands for "not measured" in float fields, None in int fields.
Fields added after schema 1 have defaults, so events written by older code still load. The base
class and the evaluation and recovery events live in :mod:`toolkit.events_base` and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toolkit.events_base import EvalProgress, Event, Generated, RecoveryStep, TaskScore


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """A pruning run began; ``linears`` lists the qualified names of every linear to prune.

    ``sparsity`` is the compression's label (``50%``, ``2:4+int4:g128``); ``compression`` its plain
    data (:meth:`toolkit.spec.compression.Compression.to_dict`: label, kind, sparsity, quant, unit), empty in
    schema-1 runs.
    """

    kind: ClassVar[str] = "RunStarted"
    run_id: str
    model: str
    method: str
    sparsity: str
    options: dict[str, Any]
    protocol: dict[str, Any]
    num_layers: int
    linears: list[str]
    device: str
    compression: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LayerStarted(Event):
    """Decoder layer ``layer`` (0-based) of ``num_layers`` is on the device."""

    kind: ClassVar[str] = "LayerStarted"
    layer: int
    num_layers: int
    groups: list[list[str]]


@dataclass(frozen=True, slots=True)
class SublayerPruned(Event):
    """One linear was pruned and/or quantized.

    ``sparsity`` is the fraction of weights its keep-mask drops (never counted from exact zeros).
    ``rel_error`` is ‖Ŵx − Wx‖/‖Wx‖ over the calibration inputs the linear sees in the pruned
    model; ``rel_error_dense`` compares with the dense layer's own inputs when those were
    gathered (nan otherwise). ``damping`` is the final Hessian damping (nan if none).
    ``bits`` is the storage bits per weight of its quantization grid, scales counted (nan when not
    quantized); ``quant_rel_error`` = ‖(Ŵ − W)⊙M‖_F/‖W⊙M‖_F, the relative change of the kept
    weights (the grid's rounding plus any update the solver made; nan when not quantized).
    ``params_before``/``params_after``: weights of the linear before and after (equal for a
    linear-scope method; None in schema-1 runs). ``weight_rel_error`` = ‖Ŵ − W‖_F/‖W‖_F, set by a data-free
    run (no calibration input: ``rel_error`` nan), nan otherwise.
    """

    kind: ClassVar[str] = "SublayerPruned"
    layer: int
    name: str
    shape: list[int]
    sparsity: float
    rel_error: float
    rel_error_dense: float
    damping: float
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)
    bits: float = math.nan
    quant_rel_error: float = math.nan
    params_before: int | None = None
    params_after: int | None = None
    weight_rel_error: float = math.nan


@dataclass(frozen=True, slots=True)
class SolverStep(Event):
    """One iteration of an iterative solver: ``objective`` and any further named ``values``."""

    kind: ClassVar[str] = "SolverStep"
    layer: int
    name: str
    solver: str
    step: int
    objective: float
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LambdaStep(Event):
    """One outer round of FISTAPruner's λ bisection (bounds, errors, ratio against ξ)."""

    kind: ClassVar[str] = "LambdaStep"
    layer: int
    name: str
    round: int
    lam: float
    lam_low: float
    lam_high: float
    e_total: float
    e_round: float
    ratio: float
    xi: float
    sparsity_before_rounding: float
    improved: bool


@dataclass(frozen=True, slots=True)
class BlockStep(Event):
    """One column block of a block-wise solver (Thanos): weights removed, error, time."""

    kind: ClassVar[str] = "BlockStep"
    layer: int
    name: str
    block: int
    removed: int
    error: float
    seconds: float


@dataclass(frozen=True, slots=True)
class LayerDone(Event):
    """Decoder layer finished: ``output_rel_error`` = ‖f̂(x) − f(x)‖/‖f(x)‖ vs the dense layer.

    ``output_rel_error`` is None when the run did not measure it (``--error none``).
    """

    kind: ClassVar[str] = "LayerDone"
    layer: int
    num_layers: int
    output_rel_error: float | None
    seconds: float


@dataclass(frozen=True, slots=True)
class EvalPoint(Event):
    """A perplexity measurement; ``which``: "dense", "pruned" or "recovered"; ``cached``: read from the dense cache."""

    kind: ClassVar[str] = "EvalPoint"
    dataset: str
    which: str
    ppl: float
    seq_len: int
    windows: int
    tokens: int
    cached: bool = False


@dataclass(frozen=True, slots=True)
class RunWarning(Event):
    """Something the user should know (damping escalated, a fallback taken)."""

    kind: ClassVar[str] = "Warning"
    message: str
    layer: int = -1
    name: str = ""


@dataclass(frozen=True, slots=True)
class RunFinished(Event):
    """The run completed.

    ``achieved_sparsity`` comes from the keep-masks; the accounting fields (see
    :mod:`toolkit.run.accounting`; None/nan in schema-1 runs): decoder-layer linear weights before and
    after (structural), weights kept by the masks, storage bits per weight of those linears (scales
    counted, dense ones at their dtype), the model's estimated bytes when stored compressed, and
    the bytes of the saved checkpoint on disk (None without ``--save-model``). ``bought``: what the
    compression bought, as result.json's ``bought`` section (:mod:`toolkit.run.bought`; None in older runs).
    """

    kind: ClassVar[str] = "RunFinished"
    achieved_sparsity: float
    prune_seconds: float
    ppl: dict[str, float]
    dense_ppl: dict[str, float]
    params_before: int | None = None
    params_after: int | None = None
    nonzeros_kept: int | None = None
    bits_per_weight: float = math.nan
    estimated_bytes: int | None = None
    checkpoint_bytes: int | None = None
    devices: str = ""  # which device(s) ran: "cpu", "cuda:0", "2 ranks × cpu (gloo)" ("" in older runs)
    gpu_peak_mb: float = math.nan  # torch.cuda.max_memory_allocated over the GPUs that ran; nan: no GPU
    bought: dict[str, Any] | None = None  # kept weights, bytes as stored, tokens/s where the model shrank


@dataclass(frozen=True, slots=True)
class RunFailed(Event):
    """The run stopped early; ``cancelled`` distinguishes a user's cancel from an error."""

    kind: ClassVar[str] = "RunFailed"
    error: str
    cancelled: bool


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted, LayerStarted, SublayerPruned, SolverStep, LambdaStep, BlockStep,
        LayerDone, EvalPoint, RunWarning, RunFinished, RunFailed,
    )
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output (None floats become nan)."""
    data = dict(data)
    cls = EVENT_TYPES[data.pop("type")]
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            value = data[f.name]
            kwargs[f.name] = math.nan if value is None and f.type == "float" else value
    return cls(**kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Block-scope (structured) runs: numerical, flap, wanda-sp, magnitude-sp (toolkit.engine.block.driver). A block run
# emits LayerScored per layer (pass 1), one GlobalRanking, then per layer LayerStarted, SublayerPruned per replaced
# Linear, UnitsRemoved per kind and LayerDone (pass 2).
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LayerScored(Event):
    """Pass 1 scored decoder layer ``layer``: head-unit scores and quantiles (0, .25, .5, .75, 1) of channel scores."""

    kind: ClassVar[str] = "LayerScored"
    layer: int
    num_layers: int
    head_scores: list[float]
    channel_quantiles: list[float]
    seconds: float


@dataclass(frozen=True, slots=True)
class AllocationPlanned(Event):
    """The plan phase spread the run's sparsity over the decoder layers (toolkit/spec/allocation.py).

    ``ratios`` holds every layer's sparsity s_l; ``outlier_ratios`` OWL's LOD_l (empty for a file);
    ``total`` the weight-weighted mean of the ratios (= the run's target).
    """

    kind: ClassVar[str] = "AllocationPlanned"
    allocation: str
    ratios: list[float]
    outlier_ratios: list[float]
    total: float
    seconds: float


@dataclass(frozen=True, slots=True)
class MaskRefined(Event):
    """DSnoT refined one linear's mask (toolkit/methods/dsnot.py): swaps made and the objectives before/after.

    ``expected_error_*`` is ‖e‖₂/‖Wμ‖₂ (DSnoT's objective); ``rel_error_*`` the measured
    ‖ΔW X*‖/‖W X*‖ of the method's mask and of the refined one.
    """

    kind: ClassVar[str] = "MaskRefined"
    layer: int
    name: str
    swaps: int
    cycles: int
    expected_error_before: float
    expected_error_after: float
    rel_error_before: float
    rel_error_after: float


@dataclass(frozen=True, slots=True)
class GlobalRanking(Event):
    """One ranking of every candidate unit of every layer; units scoring ≤ ``threshold`` were removed.

    ``scores`` is a sorted subsample (≤ 256 points) of the ranking scores; ``ratio`` asked for,
    ``achieved_ratio`` = ``params_removed`` / ``params_total`` over the candidate units. For the
    ranking plot, ``head_ranks``/``head_values`` give every head unit's 0-based position in the
    ascending ranking of all ``candidates`` and its ranking score, ``channel_ranks``/``channel_values``
    the same for an evenly spaced subsample (≤ 256) of the channels (empty in older runs).
    """

    kind: ClassVar[str] = "GlobalRanking"
    method: str
    allocation: str
    ratio: float
    achieved_ratio: float
    threshold: float
    scores: list[float]
    heads_removed: int
    heads_total: int
    channels_removed: int
    channels_total: int
    params_removed: int
    params_total: int
    candidates: int = 0
    head_ranks: list[int] = field(default_factory=list)
    head_values: list[float] = field(default_factory=list)
    channel_ranks: list[int] = field(default_factory=list)
    channel_values: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class UnitsRemoved(Event):
    """Layer ``layer`` lost ``removed`` of its ``kept + removed`` units of one ``unit`` kind.

    ``unit`` is "heads" (query heads), "kv_heads" or "channels"; params count the weights and biases
    of the modules of that kind (attention: q, k, v, o; MLP: gate, up, down). ``rel_error`` is the
    o_proj/down_proj output error after compensation, ``rel_error_uncompensated`` after plain removal.
    ``kept_map`` has one character per original unit of that kind, in index order: "1" kept,
    "0" removed (empty in older runs).
    """

    kind: ClassVar[str] = "UnitsRemoved"
    layer: int
    unit: str
    kept: int
    removed: int
    params_before: int
    params_after: int
    rel_error: float
    rel_error_uncompensated: float
    kept_map: str = ""


@dataclass(frozen=True, slots=True)
class DepthScored(Event):
    """Depth pruning scored every decoder layer and chose the ``removed`` ones (toolkit/engine/block/depth.py).

    ``influence``: block influence 1 − E[cos(x_in, x_out)] per layer (ShortGPT); ``angular``: the
    angular distance E[arccos(cos(x_l, x_{l+n}))]/π of the block of ``block`` layers starting at each l
    (empty unless ``score`` is "angular"); ``identity_error``: ‖x_out − x_in‖/‖x_out‖ per layer,
    the relative output error of skipping it; ``removed``: the removed layers' indices in the dense model.
    """

    kind: ClassVar[str] = "DepthScored"
    score: str
    num_layers: int
    block: int
    influence: list[float]
    angular: list[float]
    identity_error: list[float]
    removed: list[int]
    tokens: int
    seconds: float


EVENT_TYPES.update({cls.kind: cls for cls in (LayerScored, GlobalRanking, UnitsRemoved, AllocationPlanned,
                                               MaskRefined, DepthScored)})
EVENT_TYPES.update({cls.kind: cls for cls in (EvalProgress, TaskScore, Generated, RecoveryStep)})  # events_base
