"""The contract between the engine and the methods (CONTRIBUTING.md R2, R3, R11).

A method is a pure solver: it receives one linear's weight ``W`` (out, in) in float32, the
statistics it declared in :attr:`MethodSpec.needs`, a sparsity :data:`Target` and its config,
and returns a :class:`PruneResult`. It never runs the model, registers hooks or mutates ``W``.

Statistics (tokens are the calibration tokens, x ∈ R^in the input of the linear):
- ``gram``   G* = Σ x* x*ᵀ / N           (in, in)  inputs in the (partly) pruned model
- ``cross``  C  = Σ x* xᵀ / N            (in, in)  pruned-path inputs against dense-layer inputs
- ``dense_gram`` G = Σ x xᵀ / N          (in, in)  dense-layer inputs
- ``col_sq_norms`` ‖X*_j‖² / N = diag(G*) (in,)
- ``col_mean`` μ_j = Σ x*_j / N (in,)      the inputs' mean per column
- ``sample``  S (T, in) with SᵀS = G* over T sampled tokens: kept instead of G* when the method asked
  for no Gram (``COL_NORMS`` or nothing), where G* serves only the reported error; ``gram`` is then
  an empty (0, 0) tensor (an (in, in) Gram of a 11008-wide linear is 485 MB and O(T·in²) to build)
All are means over the N = ``count`` tokens, so their scale does not depend on nsamples; multiply
by ``count`` for the sums the papers write.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from toolkit.errors import NumericalError, RunCancelled, ToolkitError, suggest
from toolkit.events import Event, RunWarning
from toolkit.spec.targets import NM, Structured, Target, Unstructured

if typing.TYPE_CHECKING:
    from toolkit.methods.quant_grid import QuantState
    from toolkit.spec.compression import Compression, QuantSpec, Unit

SOLVER_DTYPE = torch.float32  # statistics and solves (R3); float64 where a solve asks for it


class Stat(enum.Enum):
    """Statistics a method may ask the engine for."""

    GRAM = "gram"
    COL_NORMS = "col_norms"  # only ‖X_j‖²/N; the engine then keeps a sample of X* (for the errors), no Gram
    CROSS = "cross"
    DENSE_GRAM = "dense_gram"


@dataclass
class LinearStats:
    """Calibration statistics of one linear (see the module docstring for definitions)."""

    gram: Tensor
    count: int
    cross: Tensor | None = None
    dense_gram: Tensor | None = None
    col_sq: Tensor | None = None  # ‖X_j‖²/N over all N tokens when ``gram`` is from a sample of them
    gram_count: int | None = None  # tokens behind ``gram`` when it is a sample (None: all ``count``)
    sample: Tensor | None = None  # (T, in) rows with SᵀS = G* over T sampled tokens; ``gram`` is then (0, 0)
    col_mean: Tensor | None = None  # μ_j = Σ_t x*_tj / N, the inputs' mean per column (None where not gathered)

    @property
    def col_sq_norms(self) -> Tensor:
        """‖X_j‖²/N for every input column j: the diagonal of the full Gram matrix."""
        return self.col_sq if self.col_sq is not None else torch.diagonal(self.gram)


@dataclass
class SolveContext:
    """What a solver may do besides computing, and the quantization grid to produce.

    A solver may emit events and honour cancellation.
    ``quant`` is the run's :class:`~toolkit.spec.compression.QuantSpec` (None when only pruning),
    while the sparsity target is the solver's ``target`` argument (None when only quantizing).
    """

    layer: int = 0
    name: str = ""
    quant: QuantSpec | None = None
    # whether an input scale shared by the group can be folded into the op that feeds it (a norm, or the rows of
    # v_proj / up_proj): False for o_proj under grouped-query attention (toolkit.models.fold); given to a group solve
    foldable: bool = True
    emit: Callable[[Event], None] = lambda event: None
    cancelled: Callable[[], bool] = lambda: False

    def check_cancel(self) -> None:
        """A cancellation point: raise :class:`RunCancelled` when the run was cancelled."""
        if self.cancelled():
            raise RunCancelled("cancelled")

    def warn(self, message: str) -> None:
        """Emit a :class:`RunWarning` attributed to this linear."""
        self.emit(RunWarning(message=message, layer=self.layer, name=self.name))


class Scope(enum.Enum):
    """What a method solves at once: one linear (same shape) or one decoder layer's structural block."""

    LINEAR = "linear"
    BLOCK = "block"


class Produces(enum.Enum):
    """Kinds of result a method can return."""

    MASK = "mask"  # a keep-mask (pruning)
    QUANT = "quant"  # a quantization state (codes, scales, zero points)
    STRUCTURE = "structure"  # kept units per structural group (shapes change)


@dataclass
class PruneResult:
    """A linear-scope solver's answer (alias :data:`LinearResult`).

    ``weight`` (out, in) float32 is what the model computes with: zeros where ``keep_mask`` is
    False and, when ``quant`` is set, exactly ``dequantize(quant)`` (pruned weights stay zero on the
    grid). ``keep_mask`` is all True for a quantize-only result: sparsity is always counted from
    keep-masks, never from exact zeros (a coarse grid alone makes many).
    """

    weight: Tensor
    keep_mask: Tensor
    damping: float = math.nan
    info: dict[str, Any] = field(default_factory=dict)
    quant: QuantState | None = None


LinearResult = PruneResult

PruneFn = Callable[[Tensor, LinearStats, Target | None, Any, SolveContext], PruneResult]
# the linears of one group (fed one tensor, so sharing its statistics) solved at once: {name: W} → {name: result}
GroupFn = Callable[[dict[str, Tensor], LinearStats, Target | None, Any, SolveContext], dict[str, PruneResult]]


@dataclass(frozen=True)
class MethodSpec:
    """A registry entry: name, solver, config dataclass, needed statistics, supported targets."""

    name: str
    fn: PruneFn
    config: type
    needs: frozenset[Stat]
    targets: tuple[type, ...] = (Unstructured, NM)
    summary: str = ""
    sequential: str = "group"  # the engine's default grouping (group: one fused pass per layer; see README)
    propagate: str = "pruned"  # the engine's default inter-layer propagation for this method
    scope: Scope = Scope.LINEAR
    produces: frozenset[Produces] = frozenset({Produces.MASK})
    units: tuple[Unit, ...] = ()  # structural units a block-scope method removes
    # False when its quantization states cannot be saved as pack-quantized (AWQ: Ŵ = Q(W·diag s)/s needs
    # 1/s folded into the preceding op, which a per-linear solve cannot do; see toolkit.methods.awq)
    saves_quant: bool = True
    # config → True where the states do save after all (AWQ with scale=shared: the engine folds the shared input
    # scale of each group into what feeds it, toolkit/engine/fold.py); None: ``saves_quant`` alone decides
    savable: Callable[[Any], bool] | None = None
    # solves a whole group at once (a shared input scale needs every weight of the group); the engine calls it
    # when the run folds (``folds``), and ``fn`` one linear at a time otherwise
    group_fn: GroupFn | None = None
    # True when ``fn`` never writes into the W it is given: the engine then hands it the layer's weight itself
    # instead of a copy (one (out, in) float32 tensor less at the host peak of a 7B layer)
    reads_weight_only: bool = False
    # True when ``fn`` reads the weight alone (magnitude, RTN): the engine then skips capture, statistics and
    # propagation (toolkit/engine/data_free.py) and hands it empty statistics
    data_free: bool = False
    # (compression, config) → a one-line ToolkitError where an option does not fit the run; called before the
    # model loads (toolkit.run.config), as check() is
    config_check: Callable[[Any, Any], None] | None = None

    def saves(self, cfg: Any) -> bool:
        """Whether this method's quantization states save as a pack-quantized checkpoint with options ``cfg``."""
        return self.saves_quant or (self.savable is not None and self.savable(cfg))

    def folds(self, cfg: Any) -> bool:
        """Whether the engine folds this run's shared input scales (a method that saves only once folded)."""
        return not self.saves_quant and self.savable is not None and self.savable(cfg)

    def supports(self, target: Target) -> bool:
        """True if the method can meet this kind of sparsity target."""
        return isinstance(target, self.targets)

    def check(self, compression: Compression) -> None:
        """Raise a one-line :class:`ToolkitError` when the method cannot meet ``compression``.

        The message names what the method supports; this is checked before the model loads.
        """
        kinds = {Unstructured: "unstructured (50%)", NM: "n:m (2:4)", Structured: "structured (structured:30%)"}
        patterns = ", ".join(kinds[t] for t in self.targets if t in kinds) or "no sparsity pattern"
        if not self.targets and Produces.QUANT in self.produces:  # quantize-only: first, whatever sparsity came
            self._check_quantize_only(compression)
        if compression.sparsity is not None and not self.supports(compression.sparsity):
            raise ToolkitError(f"{self.name} supports {patterns}, not {compression.sparsity}")
        if compression.quant is not None and Produces.QUANT not in self.produces:
            raise ToolkitError(f"{self.name} only prunes ({patterns}); --quant needs a quantizing method "
                               "(see `python -m toolkit methods`)")
        if compression.sparsity is None and Produces.QUANT not in self.produces:
            raise ToolkitError(f"{self.name} prunes and needs --sparsity ({patterns})")
        if compression.unit is not None and compression.unit not in self.units:
            units = ", ".join(u.value for u in self.units) or "none (it works on single linears)"
            raise ToolkitError(f"{self.name} cannot remove --unit {compression.unit.value}; its units: {units}")

    def _check_quantize_only(self, compression: Compression) -> None:
        """A method that only quantizes needs a grid and no sparsity (a default 50% counts as none asked).

        The grid is checked first: a run without ``--quant`` reaches here with the CLI's or
        :class:`~toolkit.run.config.RunConfig`'s default sparsity, which the user never typed.
        """
        if compression.quant is None:
            raise ToolkitError(f"{self.name} quantizes: give --quant int4 (or int3, int2, int8; int4:g64 sets the "
                               "group of inputs per scale)")
        if compression.sparsity is not None:
            raise ToolkitError(f"{self.name} only quantizes and cannot prune to {compression.sparsity}: drop "
                               "--sparsity, or prune and quantize with awp, wanda+awq or awq+wanda")

    def check_config(self, compression: Compression, cfg: Any) -> None:
        """Raise a one-line :class:`ToolkitError` when an option of ``cfg`` does not fit ``compression``."""
        if self.config_check is not None:
            self.config_check(compression, cfg)

    def make_config(self, options: dict[str, Any] | None = None) -> Any:
        """Build the config from ``options`` (strings from ``--set`` are converted by type)."""
        return build_config(self.config, options or {}, self.name)

    def describe_options(self) -> list[dict[str, Any]]:
        """Each option's name, type, default and help (the ``metadata['help']`` of the field)."""
        hints = typing.get_type_hints(self.config)
        return [
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": f.default,
                "help": f.metadata.get("help", ""),
                "choices": list(f.metadata.get("choices", ())),
            }
            for f in dataclasses.fields(self.config)
        ]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(raw: Any, tp: Any, name: str, method: str) -> Any:
    if not isinstance(raw, str):
        if tp is float and isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        if tp is int and isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if (tp is bool and isinstance(raw, bool)) or (tp is str and isinstance(raw, str)):
            return raw
        raise ToolkitError(f"option {name} of {method} must be {_type_name(tp)}, got {raw!r}")
    text = raw.strip()
    try:
        if tp is bool:
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if tp is int:
            return int(text)
        if tp is float:
            return float(text)
    except ValueError:
        raise ToolkitError(
            f"option {name} of {method} must be {_type_name(tp)}, got {raw!r}"
        ) from None
    return text


def build_config(cls: type, options: dict[str, Any], method: str) -> Any:
    """Instantiate the config dataclass ``cls`` from user ``options`` with clear errors."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, raw in options.items():
        if key not in fields:
            raise ToolkitError(
                f"{method} has no option {key!r}.{suggest(key, fields)} "
                f"Options: {', '.join(fields) or 'none'}"
            )
        value = _convert(raw, hints[key], key, method)
        choices = fields[key].metadata.get("choices")
        if choices and value not in choices:
            raise ToolkitError(f"option {key} of {method} must be one of {list(choices)}, got {value!r}")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ToolkitError:
        raise
    except (TypeError, ValueError) as exc:
        raise ToolkitError(f"invalid options for {method}: {exc}") from None


def option(default: Any, help: str, choices: tuple = ()) -> Any:  # `help` names the dataclass field's help text
    """A config field with its help text (shown by ``python -m toolkit methods`` and the app)."""
    return field(default=default, metadata={"help": help, "choices": choices})


def damped_cholesky_inverse(
    H: Tensor, damp_frac: float, ctx: SolveContext, max_tries: int = 6
) -> tuple[Tensor, float]:
    """Upper Cholesky factor U of (H + δ·mean(diag H)·I)⁻¹, with δ escalating ×10 on failure.

    Returns ``(U, damping)`` with ``U`` (in, in) upper-triangular such that Uᵀ U = (H + δ̄ I)⁻¹:
    row i of U gives the OBS quantities of the SparseGPT sweep ([H_F⁻¹]_ii = U_ii²). Dead inputs
    (zero diagonal) must be handled by the caller. Raises :class:`NumericalError` after
    ``max_tries`` escalations and emits a Warning event for every escalation.
    """
    mean_diag = torch.mean(torch.diagonal(H)).item()
    if not math.isfinite(mean_diag):
        raise NumericalError(f"{ctx.name}: the Hessian has non-finite entries; check the inputs")
    scale = mean_diag if mean_diag > 0 else 1.0
    damp = damp_frac
    eye = torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    for attempt in range(max_tries):
        L, info = torch.linalg.cholesky_ex(H + damp * scale * eye)
        if int(info) == 0:
            Hinv = torch.cholesky_inverse(L)
            U, info2 = torch.linalg.cholesky_ex(Hinv, upper=True)
            if int(info2) == 0 and torch.isfinite(U).all():
                return U, damp
        if attempt + 1 < max_tries:
            nxt = damp * 10 if damp > 0 else 1e-4
            ctx.warn(f"Cholesky failed at damping {damp:g}; retrying with {nxt:g}")
            damp = nxt
    raise NumericalError(
        f"{ctx.name}: Cholesky failed even at damping {damp:g}; increase damp_frac or nsamples"
    )


def zero_dead_inputs(W: Tensor, H: Tensor) -> tuple[Tensor, Tensor]:
    """Inputs that are always zero carry no information: set H_jj = 1 and W_:j = 0 (SparseGPT)."""
    dead = torch.diagonal(H) == 0
    if bool(dead.any()):
        H = H.clone()
        W = W.clone()
        H[dead, dead] = 1.0
        W[:, dead] = 0.0
    return W, H


def structured_supported() -> tuple[type, ...]:
    """Targets tuple for methods that support all three patterns."""
    return (Unstructured, NM, Structured)
