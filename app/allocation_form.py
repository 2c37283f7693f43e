"""The Run form's layer allocation (uniform / OWL / custom ratios) and mask refinement (none / DSnoT), as plain data.

Pure functions of the form values (no Gradio; :mod:`app.allocation_panel` lays them out), so the tests
drive the same checks the page runs. The choices become RunConfig's ``allocation`` and ``refine``
(docs/allocation.md); RunConfig refuses the combinations that cannot work (OWL with 2:4, with a
block-scope or a quantize-only method) with its own one-line message.

The custom table has one row per decoder layer: ``[layer, sparsity, weights]`` (sparsity a fraction
in [0, 1), weights the layer's linear weights, blank when unknown). It is prefilled from a stored run
(its OWL or file ratios, or its target in every layer) and checked with
:func:`toolkit.spec.allocation.check_ratios`: the total is weighted by the weights column when every
row has one, else the plain mean. Its export and the run both use the file the CLI takes,
``{"layers": [...]}``, named by its content (``allocation-<hash>.json`` in the run store's folder), so
the same table gives the same file and a run with the same ratios is found again in the store.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.api import list_runs, open_run
from toolkit.errors import ToolkitError
from toolkit.live.allocation import allocation_from_result
from toolkit.spec.allocation import FILE, Allocation, check_ratios, weighted_mean
from toolkit.spec.refine import DEFAULT_CYCLES
from toolkit.spec.targets import Target, Unstructured

UNIFORM, OWL, CUSTOM = "uniform", "OWL", "custom"
ALLOCATIONS = (UNIFORM, OWL, CUSTOM)
NO_REFINE, DSNOT = "none", "DSnoT"
REFINES = (NO_REFINE, DSNOT)
HEADERS = ["layer", "sparsity (0–1)", "weights"]
SOURCE = "the custom ratios table"  # how check_ratios names the table in its messages
DIGITS = 4  # a prefilled ratio's decimals: the total moves by < 1e-4, well inside the check's 5e-4


@dataclass
class AllocationSettings:
    """The form's allocation and refinement inputs (``table``: rows ``[layer, sparsity, weights]``)."""

    choice: str = UNIFORM  # uniform | OWL | custom
    owl_m: Any = 5.0  # outlier threshold M
    owl_lambda: Any = 0.08  # λ
    table: list[list[Any]] = field(default_factory=list)
    refine: str = NO_REFINE  # none | DSnoT
    cycles: Any = DEFAULT_CYCLES  # DSnoT's swap cycles per row


def _number(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolkitError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ToolkitError(f"{what} must be a finite number, got {value!r}")
    return number


def rows_of(table: Any) -> list[list[Any]]:
    """The table's non-blank rows as lists (a Gradio value: a list of lists, or a pandas frame)."""
    rows = table.values.tolist() if hasattr(table, "values") else list(table or [])
    return [list(row) for row in rows if any(cell not in (None, "") for cell in row)]


def table_rows(table: Any) -> tuple[list[float], list[int]]:
    """The table's ratios and weights ([] when any row has no weight); one line for a cell that is not a number."""
    rows = rows_of(table)
    if not rows:
        raise ToolkitError(f"{SOURCE} is empty: fill it from a run (one row per decoder layer) or pick uniform")
    ratios, weights = [], []
    for index, row in enumerate(rows):
        ratios.append(_number(row[1] if len(row) > 1 else None, f"layer {index}'s sparsity"))
        weight = row[2] if len(row) > 2 else None
        weights.append(int(_number(weight, f"layer {index}'s weights")) if weight not in (None, "") else 0)
    return ratios, (weights if all(w > 0 for w in weights) else [])


def checked_ratios(table: Any, target: float) -> list[float]:
    """The table's ratios once :func:`~toolkit.spec.allocation.check_ratios` accepts them for ``target``."""
    ratios, weights = table_rows(table)
    check_ratios(ratios, weights or [1] * len(ratios), target, SOURCE)
    return ratios


def total_line(table: Any, target: Target | None) -> str:
    """The line under the table: its total (weighted or plain) and whether it meets ``target``, or what is wrong."""
    try:
        ratios, weights = table_rows(table)
    except ToolkitError as exc:
        return f"⚠ {exc}"
    how = "weighted by each layer's weights" if weights else "plain mean (no weights: fill from a run to weight it)"
    total = weighted_mean(ratios, weights or [1] * len(ratios))
    line = f"total **{total:.2%}** ({how}) over {len(ratios)} layers"
    if not isinstance(target, Unstructured):
        return f"{line} · ⚠ the custom ratios spread an unstructured sparsity: pick the unstructured pattern"
    try:
        check_ratios(ratios, weights or [1] * len(ratios), target.sparsity, SOURCE)
    except ToolkitError as exc:
        return f"⚠ {exc}"
    return f"{line} · matches the sparsity {target.sparsity:.0%} ✓"


def _ratio_text(ratios: list[float]) -> str:
    return json.dumps({"layers": [float(r) for r in ratios]}, indent=1) + "\n"


def ratio_path(ratios: list[float], folder: str | Path) -> Path:
    """Where :func:`ratio_file` puts ``ratios`` in ``folder``: ``allocation-<hash of the content>.json``."""
    return Path(folder) / f"allocation-{hashlib.sha256(_ratio_text(ratios).encode()).hexdigest()[:10]}.json"


def ratio_file(ratios: list[float], folder: str | Path) -> Path:
    """The CLI's ratio file ``{"layers": ratios}`` in ``folder``, named by its content (written once)."""
    path = ratio_path(ratios, folder)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_ratio_text(ratios), encoding="utf-8")
    return path


def config_fields(settings: AllocationSettings, target: Target | None, runs_dir: str) -> dict[str, Any]:
    """RunConfig's ``allocation`` and ``refine`` of the form; a custom table is checked against ``target`` first.

    A custom table becomes an :class:`~toolkit.spec.allocation.Allocation` naming its ratio file under
    ``runs_dir``; :func:`write_ratio_file` writes that file once RunConfig accepted the config.
    """
    choice = settings.choice or UNIFORM
    if choice not in ALLOCATIONS:
        raise ToolkitError(f"unknown allocation {choice!r}: pick one of {', '.join(ALLOCATIONS)}")
    allocation: Allocation | str = UNIFORM
    if choice == OWL:
        allocation = f"owl:{_number(settings.owl_m, 'OWL M'):g},{_number(settings.owl_lambda, 'OWL λ'):g}"
    elif choice == CUSTOM:
        ratios, _ = table_rows(settings.table)
        if isinstance(target, Unstructured):  # other targets: RunConfig says why allocation does not apply
            ratios = checked_ratios(settings.table, target.sparsity)
        allocation = Allocation(kind=FILE, ratios=tuple(ratios), path=str(ratio_path(ratios, runs_dir)))
    refine = None
    if (settings.refine or NO_REFINE) == DSNOT:
        cycles = _number(settings.cycles, "DSnoT cycles")
        if not cycles.is_integer() or cycles < 1:
            raise ToolkitError(f"DSnoT cycles must be a whole number ≥ 1, got {settings.cycles!r}")
        refine = f"dsnot:{int(cycles)}"
    elif settings.refine not in REFINES:
        raise ToolkitError(f"unknown refinement {settings.refine!r}: pick one of {', '.join(REFINES)}")
    return {"allocation": allocation, "refine": refine}


def write_ratio_file(allocation: Any) -> None:
    """Write the ratio file a custom allocation names (RunConfig accepted it); nothing for other allocations."""
    if isinstance(allocation, Allocation) and allocation.kind == FILE and allocation.path:
        ratio_file(list(allocation.ratios), Path(allocation.path).parent)


def export(table: Any, target: Target | None, runs_dir: str) -> str:
    """Check the table against ``target``, write its ratio file in ``runs_dir`` and return a copy to download."""
    if not isinstance(target, Unstructured):
        raise ToolkitError("the custom ratios spread an unstructured sparsity: pick the unstructured pattern first")
    path = ratio_file(checked_ratios(table, target.sparsity), runs_dir)
    return str(shutil.copy(path, Path(tempfile.mkdtemp(prefix="prunelab-allocation-")) / path.name))


def source_runs(runs_dir: str) -> list[str]:
    """Finished runs with per-layer records (newest first): what the table can be filled from."""
    return [r.run_id for r in list_runs(runs_dir)
            if r.status == "finished" and isinstance(r.result, dict) and r.result.get("layers")]


def table_from_run(run_id: str, runs_dir: str) -> tuple[list[list[Any]], float]:
    """Rows ``[layer, s_l, weights]`` of a stored run and its target in percent.

    The rows hold its planned ratios (OWL, a file), or its target in every layer (uniform, n:m).
    Raises :class:`ToolkitError` for a run without per-layer sparsity.
    """
    record = open_run(Path(runs_dir) / str(run_id))
    view = allocation_from_result(record.result if isinstance(record.result, dict) else {})
    ratios = view.layer_ratios()
    if not view.applies or not ratios:
        raise ToolkitError(f"run {run_id} has no per-layer sparsity to start from (it is "
                           f"{view.compression or 'not finished'}): pick an unstructured run")
    weights = view.layer_weights if len(view.layer_weights) == len(ratios) else [None] * len(ratios)
    rows = [[layer, round(ratio, DIGITS), weight] for layer, (ratio, weight) in enumerate(zip(ratios, weights,
                                                                                              strict=True))]
    return rows, round(100 * view.target, 2)


def uniform_rows(table: Any, percent: Any) -> list[list[Any]]:
    """The table's rows (layers and weights kept) with every sparsity set to ``percent``."""
    value = round(_number(percent, "sparsity") / 100.0, DIGITS)
    return [[row[0], value, row[2] if len(row) > 2 else None] for row in rows_of(table)]
