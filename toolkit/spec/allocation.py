"""Layer-wise sparsity allocation: parse ``--allocation``, check a ratio file, OWL's ratios. Torch-free.

``--allocation`` chooses how a run's total sparsity S is spread over the decoder layers; the method
then prunes layer l to its own ratio s_l (every linear of the layer gets ``Unstructured(s_l)``):

- ``uniform`` (the default): s_l = S for every layer.
- ``owl[:M,λ]``: OWL, outlier-weighted layer-wise sparsity (Yin et al., ICML 2024). In the plan phase
  the engine scores every weight of layer l with Wanda's A_ij = |W_ij| · ‖X_j‖₂ on the dense model's
  calibration inputs and counts the layer's outlier ratio
  LOD_l = (1/N_l) Σ_ij 𝟙[A_ij > M · Ā_l]   (Ā_l the mean score of the layer, N_l its weights).
  Layers with more outliers keep more weights:
  D_l = 2λ (LOD_l − min LOD) / (max LOD − min LOD),   s_l = S − (D_l − D̄),
  so every s_l lies within S − 2λ … S + 2λ (± λ around S when the LODs are spread evenly).
  D̄ is the mean of D weighted by each layer's weight count n_l, so Σ n_l s_l = S Σ n_l exactly
  (the OWL paper's plain mean, for layers of equal size; a shrunk model's layers differ). Defaults
  M = 5, λ = 0.08: the paper's setting for LLaMA-7B at 70 %.
- ``FILE.json``: the per-layer ratios a user edits (the app exports them): ``{"layers": [s_0, s_1, …]}``
  or a bare list. Each ratio is a finite number in [0, 1) when the file is read; the count (one ratio
  per decoder layer) and the weight-weighted mean (equal to ``--sparsity`` within
  :data:`TOTAL_TOLERANCE`) are checked against the model's layers (:func:`check_ratios`) before the
  model loads where its files tell them (:mod:`toolkit.run.inputs`), and again on the loaded model.

Allocation spreads an unstructured target only: n:m fixes the count of every group of m weights,
structured targets belong to block-scope methods that plan their own per-layer removal, and a
quantize-only run has no sparsity to spread.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ToolkitError

UNIFORM = "uniform"
OWL = "owl"
FILE = "file"
DEFAULT_OUTLIER_THRESHOLD = 5.0  # M: a weight is an outlier when its score exceeds M × the layer's mean score
DEFAULT_LAMBDA = 0.08  # λ: the half-width of the band of layer ratios around the target
TOTAL_TOLERANCE = 5e-4  # a ratio file's weighted mean may differ from --sparsity by this much (rounding of 3 digits)


@dataclass(frozen=True)
class Allocation:
    """How the target sparsity is spread over layers: ``kind`` uniform | owl | file.

    ``outlier_threshold`` (M) and ``lam`` (λ) are OWL's; ``ratios`` and ``path`` a file's (ratios
    are checked against the model by :func:`check_ratios` once it is loaded).
    """

    kind: str = UNIFORM
    outlier_threshold: float = DEFAULT_OUTLIER_THRESHOLD
    lam: float = DEFAULT_LAMBDA
    ratios: tuple[float, ...] = ()
    path: str = ""

    @property
    def label(self) -> str:
        """The text form: ``uniform``, ``owl:5,0.08`` or the file's path."""
        if self.kind == OWL:
            return f"owl:{self.outlier_threshold:g},{self.lam:g}"
        return self.path if self.kind == FILE else UNIFORM

    @property
    def uniform(self) -> bool:
        """True when every layer gets the run's own target."""
        return self.kind == UNIFORM

    def to_dict(self) -> dict[str, object]:
        """Plain data for config.json and result.json."""
        data: dict[str, object] = {"kind": self.kind, "label": self.label}
        if self.kind == OWL:
            data.update(outlier_threshold=self.outlier_threshold, lam=self.lam)
        if self.kind == FILE:
            data.update(path=self.path, ratios=list(self.ratios))
        return data


def parse_allocation(text: str | Allocation | None) -> Allocation:
    """``uniform`` | ``owl`` | ``owl:M,λ`` | a JSON file's path → :class:`Allocation` (one line on bad input)."""
    if isinstance(text, Allocation):
        return text
    if text is None or not str(text).strip() or str(text).strip().lower() == UNIFORM:
        return Allocation()
    text = str(text).strip()
    name, _, params = text.partition(":")
    if name.lower() == OWL:
        return _parse_owl(params, text)
    path = Path(text).expanduser()
    if path.suffix.lower() != ".json":
        raise ToolkitError(f"unknown --allocation {text!r}: use uniform, owl, owl:M,λ (e.g. owl:5,0.08) "
                           "or a .json file of per-layer ratios")
    return Allocation(kind=FILE, ratios=read_ratio_file(path), path=os.path.abspath(path))  # the record, from anywhere


def _parse_owl(params: str, text: str) -> Allocation:
    if not params:
        return Allocation(kind=OWL)
    parts = [p.strip() for p in params.split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 2:
        raise ToolkitError(f"--allocation {text!r}: OWL takes two numbers, owl:M,λ (e.g. owl:5,0.08)")
    threshold, lam = values
    if not math.isfinite(threshold) or not math.isfinite(lam):
        raise ToolkitError(f"--allocation {text!r}: M and λ must be finite numbers (e.g. owl:5,0.08)")
    if not threshold > 0:
        raise ToolkitError(f"--allocation {text!r}: the outlier threshold M must be > 0 (the paper uses 3–10)")
    if not 0 <= lam < 0.5:
        raise ToolkitError(f"--allocation {text!r}: λ must be in [0, 0.5) (the paper uses 0.02–0.2)")
    return Allocation(kind=OWL, outlier_threshold=threshold, lam=lam)


def read_ratio_file(path: Path) -> tuple[float, ...]:
    """The ratios of a JSON file ``{"layers": [...]}`` or ``[...]``, each a finite number in [0, 1).

    One line when the file is missing, a folder, unreadable, malformed or holds a bad ratio.
    """
    if path.is_dir():
        raise ToolkitError(f"allocation file {str(path)!r} is a folder, not a file: give a .json file of per-layer "
                           "ratios")
    if not path.is_file():
        raise ToolkitError(f"allocation file {str(path)!r} does not exist: give a .json file of per-layer ratios")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolkitError(f"allocation file {str(path)!r} is not readable JSON ({exc}): "
                           'write {"layers": [0.6, 0.7, …]}') from None
    layers = data.get("layers") if isinstance(data, dict) else data
    if not isinstance(layers, list) or not layers:
        raise ToolkitError(f'allocation file {str(path)!r} needs {{"layers": [one ratio per decoder layer]}}')
    ratios = []
    for index, value in enumerate(layers):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolkitError(f"allocation file {str(path)!r}: layer {index}'s ratio {value!r} is not a number")
        ratios.append(float(value))
    check_ratio_range(ratios, f"allocation file {str(path)!r}")
    return tuple(ratios)


def check_ratio_range(ratios: tuple[float, ...] | list[float], source: str) -> None:
    """One line naming the first ratio that is not a finite number in [0, 1) (NaN and ±inf included)."""
    for index, value in enumerate(ratios):
        if not math.isfinite(value):
            raise ToolkitError(f"{source}: layer {index}'s ratio {value:g} is not a finite number; give a sparsity "
                               "in [0, 1), e.g. 0.5")
        if not 0.0 <= value < 1.0:
            why = "a sparsity cannot be negative" if value < 0 else "1 removes every weight of the layer"
            raise ToolkitError(f"{source}: layer {index}'s ratio {value:g} is outside [0, 1) ({why}); give a sparsity "
                               "such as 0.5")


def check_ratio_count(ratios: tuple[float, ...] | list[float], layers: int, source: str) -> None:
    """One line when there is not exactly one ratio per decoder layer (``layers`` of them)."""
    if len(ratios) != layers:
        raise ToolkitError(f"{source} has {len(ratios)} layer ratios; the model has {layers} decoder layers: "
                           "give one ratio per layer")


def weighted_mean(values: list[float] | tuple[float, ...], sizes: list[int]) -> float:
    """Σ n_l v_l / Σ n_l: the total sparsity of per-layer ratios ``values`` over layers of ``sizes`` weights."""
    total = sum(sizes)
    return sum(v * n for v, n in zip(values, sizes, strict=True)) / total if total else 0.0


def check_ratios(ratios: tuple[float, ...] | list[float], sizes: list[int], target: float, source: str) -> None:
    """One line when ``ratios`` do not fit the model: count, range [0, 1), total vs ``target``.

    ``sizes`` are the decoder layers' weight counts (the linears allocation applies to).
    """
    check_ratio_count(ratios, len(sizes), source)
    check_ratio_range(ratios, source)
    total = weighted_mean(ratios, sizes)
    if abs(total - target) > TOTAL_TOLERANCE:
        raise ToolkitError(f"{source}: the ratios give a total sparsity of {total:.4f} (weighted by each layer's "
                           f"weights), --sparsity is {target:.4f}: they differ by {total - target:+.4f}; "
                           "scale the ratios or change --sparsity")


def owl_ratios(outlier_ratios: list[float], sizes: list[int], target: float, lam: float) -> list[float]:
    """s_l = S − (D_l − D̄) with D_l = 2λ (LOD_l − min)/(max − min), D̄ weighted by ``sizes`` (module docstring).

    Equal LODs give the uniform allocation. Raises a one-line :class:`ToolkitError` when a layer's
    ratio leaves [0, 1) (λ too wide for this target).
    """
    low, high = min(outlier_ratios), max(outlier_ratios)
    if high - low <= 0:
        return [target] * len(outlier_ratios)
    spread = [2 * lam * (value - low) / (high - low) for value in outlier_ratios]
    mean = weighted_mean(spread, sizes)
    ratios = [target - (d - mean) for d in spread]
    for index, value in enumerate(ratios):
        if not 0.0 <= value < 1.0:
            raise ToolkitError(f"OWL with λ={lam:g} at {target:.0%} puts layer {index} at {value:.1%}, outside "
                               f"[0, 1): lower λ (owl:M,λ) or the sparsity")
    return ratios
