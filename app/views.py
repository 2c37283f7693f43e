"""A :class:`toolkit.live.view.RunView` as the page shows it: figures, status line, result table.

Pure functions (no Gradio): the Run tab calls :func:`render` on every tick with the revisions it
sent last, so only figures whose data changed travel to the browser; the Runs tab renders a
replayed view once.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from app import card
from app.page_words import page_words
from toolkit.figures.registry import FIGURES, RUN_FIGURES, SOLVER_PANELS, figure, revision, solver_figures
from toolkit.live.phase import format_seconds, progress_line
from toolkit.live.view import RunView

__all__ = ["FIGURES", "SOLVER_PANELS", "figure", "solver_figures"]

def paired(figures: tuple[str, ...]) -> tuple[str, ...]:
    """``figures`` with both solver panels when either is there: they redraw together, never staggered."""
    if any(name in SOLVER_PANELS for name in figures):
        return tuple(dict.fromkeys((*figures, *SOLVER_PANELS)))
    return figures


def visible(view: RunView) -> dict[str, bool]:
    """What the page shows of ``view``: every panel the run fills, and the finished run's answer and files.

    A figure the registry marks ``hidden_until_drawn`` shows once its ``drawn(view)`` holds: the
    convergence and λ panels for a solver trace (FISTAPruner, AWP, Thanos' blocks, Newton steps),
    the per-layer sparsity for a run that spreads one, DSnoT's panel once it refined a linear, the
    ranking and kept-unit maps for a structured run. A Wanda run never fills the solver panels, so
    they stay hidden all run; before any run only the heat-map and the layer error show. ``card``,
    ``exports``, ``files`` and ``result`` show for a finished run (``result`` also says why a run did
    not finish), ``warnings`` and ``generations`` once there are some.
    """
    shown = {name: not spec.hidden_until_drawn or spec.drawn(view) for name, spec in RUN_FIGURES.items()}
    finished = view.status == "finished"
    return {**shown, "card": finished, "exports": finished, "files": finished,
            "result": view.status in ("finished", "failed", "cancelled", "interrupted"),
            "warnings": bool(view.warnings), "generations": bool(view.evals.texts)}


STATUS_WORDS = {"running": "▶ running", "finished": "✓ finished", "failed": "✗ failed", "cancelled": "■ cancelled",
                "interrupted": "⚠ interrupted", "idle": "idle"}


def status_markdown(view: RunView, now: float) -> str:
    """Headline and progress: method, model, layer i of n, elapsed, estimated time left."""
    if view.status == "idle":
        return "Pick a model, a method and a sparsity, then **Run**."
    head = f"**{STATUS_WORDS.get(view.status, view.status)}** · {view.method} {view.sparsity} on {view.model_label}"
    if view.status == "finished":  # the answer on the line itself: ppl 17.47 → 43.58 (+149%) · 3 min 20 s
        head += f" · {card.headline(view, now)}"
    lines = [head, f'<progress value="{view.bar_fraction:.3f}" max="1"></progress> {progress_line(view, now)}']
    if view.status in ("failed", "interrupted"):
        lines.append(f"**Error:** {page_words(view.error)}")
    elif view.status == "cancelled":
        lines.append("The run was cancelled; the run store marks it **cancelled** and keeps its events.")
    return "\n\n".join(lines)


def _ppl_rows(view: RunView) -> list[str]:
    evaluation = view.protocol.get("evaluation") or {}
    where = f"{evaluation.get('windows', '?')} × {evaluation.get('seqlen', '?')} tokens" if evaluation else ""
    rows = []
    for dataset in dict.fromkeys(list(view.dense_ppl) + list(view.ppl)):
        dense, pruned = view.dense_ppl.get(dataset, math.nan), view.ppl.get(dataset, math.nan)
        change = f" ({(pruned / dense - 1):+.1%})" if math.isfinite(dense) and math.isfinite(pruned) and dense else ""
        cached = " (cached)" if dataset in view.dense_cached else ""
        rows.append(f"| perplexity ({dataset}, {where}) | {_fmt(dense)}{cached} | {_fmt(pruned)}{change} |")
    return rows


def _fmt(value: float, spec: str = ".3f") -> str:
    return format(value, spec) if isinstance(value, int | float) and math.isfinite(value) else "–"


def result_markdown(view: RunView) -> str:
    """Dense vs pruned perplexity, achieved sparsity and times, as a Markdown table."""
    if view.status in ("idle", "running"):
        return ""
    if view.status != "finished":
        return f"No result: the run {view.status} ({view.error})." if view.error else f"No result: {view.status}."
    lines = ["| | dense | compressed |", "|---|---|---|", *_ppl_rows(view),
             f"| sparsity (achieved, from the keep-masks) | 0 | {_fmt(view.achieved_sparsity, '.2%')} |",
             *_accounting_rows(view),
             f"| prune time | | {format_seconds(view.prune_seconds)} |",
             f"| ran on · GPU memory peak | | {view.devices or view.device} · {_gpu_peak(view.gpu_peak_mb)} |"]
    lines += accuracy_lines(view)
    calibration = view.protocol.get("calibration") or {}
    if calibration.get("used") is False:  # a data-free method: no text was read
        lines.append(f"\nNo calibration: {view.method} reads the weights alone · device {view.device} · "
                     f"run `{view.run_id}`")
    elif calibration:
        lines.append(f"\nCalibration: {calibration.get('nsamples')} × {calibration.get('seqlen')} tokens of "
                     f"{calibration.get('source')} (seed {calibration.get('seed')}) · device {view.device} · "
                     f"run `{view.run_id}`")
    return "\n".join(lines)


def accuracy_lines(view: RunView) -> list[str]:
    """Zero-shot accuracy dense vs pruned, one row per task and the mean; nothing when no task was scored."""
    rows = view.evals.accuracy_rows()
    if not rows:
        return []
    zero_shot = view.protocol.get("zero_shot") or {}
    limit = zero_shot.get("limit")
    lines = ["", f"Zero-shot accuracy (lm-eval, 0 shots{f', first {limit} examples per task' if limit else ''}; "
                 f"data: {zero_shot.get('source', '?')}):", "",
             "| task | split | metric | examples | dense | pruned | change |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.task} | {row.split} | {row.metric} | {row.examples} | {_fmt(row.dense, '.4f')} | "
                     f"{_fmt(row.pruned, '.4f')} | {_fmt(row.pruned - row.dense, '+.4f')} |")
    dense, pruned = view.evals.mean("dense"), view.evals.mean("pruned")
    lines.append(f"| **mean** | | | | {_fmt(dense, '.4f')} | {_fmt(pruned, '.4f')} | {_fmt(pruned - dense, '+.4f')} |")
    return lines


def generations_html(view: RunView) -> str:
    """Greedy continuations of the fixed prompts, dense and pruned side by side, with tokens/s."""
    from html import escape

    dense, pruned = view.evals.texts.get("dense", []), view.evals.texts.get("pruned", [])
    if not dense and not pruned:
        return ""
    rows = []
    for index, first in enumerate(dense or pruned):
        cells = []
        for texts in (dense, pruned):
            text = texts[index] if index < len(texts) else None
            speed = f"{text.new_tokens / text.seconds:.1f} tokens/s" if text and text.seconds > 0 else ""
            cells.append(f'<td class="gen-text"><pre>{escape(text.text) if text else "…"}</pre>'
                         f"<small>{speed}</small></td>")
        rows.append(f"<tr><td><b>{escape(first.prompt)}</b></td>{''.join(cells)}</tr>")
    return ('<table class="generations"><thead><tr><th>prompt</th><th>dense</th><th>pruned</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table><small>greedy decoding, no chat template</small>")


def _gpu_peak(peak_mb: float) -> str:
    return f"{peak_mb:.0f} MiB" if math.isfinite(peak_mb) else "n/a"


def _accounting_rows(view: RunView) -> list[str]:
    """Weights, bits per weight and bytes (none for runs recorded before the accounting existed)."""
    before, after = view.params
    if before is None:
        return []
    rows = [f"| linear weights (decoder layers) | {before:,} | {after:,} |",
            f"| bits per weight (scales counted) | | {_fmt(view.bits_per_weight, '.3f')} |"]
    if view.bought is not None:
        return rows + _bought_rows(view.bought)
    if view.estimated_bytes is not None:
        rows.append(f"| size, quantized linears packed (estimate) | | {view.estimated_bytes / 2**20:.2f} MiB |")
    if view.checkpoint_bytes is not None:
        rows.append(f"| saved checkpoint on disk | | {view.checkpoint_bytes / 2**20:.2f} MiB |")
    return rows


def _bought_rows(bought: dict[str, Any]) -> list[str]:
    """Weights kept, bytes as the run saves the model, and decode speed where the model shrank."""
    how = "measured on disk" if bought["bytes_measured"] else "computed"
    rows = [f"| weights kept (from the keep-masks) | {bought['params_before']:,} | {bought['kept_weights']:,} |",
            f"| bytes as the run saves the model ({bought['stored_as']}; {how}) | {card.size(bought['bytes_dense'])} "
            f"| {card.size(bought['bytes_stored'])} |"]
    speed = bought.get("speed")
    if speed:
        rows.append(f"| greedy decode tokens/s ({speed['device']}, batch {speed['batch']}, {speed['new_tokens']} new "
                    f"tokens) | {speed['dense_tokens_per_s']:.1f} | {speed['tokens_per_s']:.1f} |")
    return rows


def warnings_text(view: RunView) -> str:
    """The Warning events, one a line (newest last)."""
    return "\n".join(view.warnings) if view.warnings else ""


def stale(view: RunView, sent: dict[str, int] | None) -> list[str]:
    """The figures whose data changed since revisions ``sent``."""
    return [name for name in FIGURES if sent is None or sent.get(name, -1) != revision(view, name)]


def render(view: RunView, now: float, sent: dict[str, int] | None = None,
           figures: tuple[str, ...] = FIGURES) -> tuple[dict[str, Any], dict[str, int]]:
    """Output values for the sections changed since revisions ``sent``; returns them and the new revisions.

    ``sent=None`` renders everything; only the figures named in ``figures`` are drawn (the
    others stay stale for a later call). The two solver panels are drawn together or not at all,
    from one snapshot (:func:`solver_figures`). Keys: status, the figures (:data:`FIGURES`), card,
    warnings, result, generations.
    """
    revisions = {**view.revision, **{name: revision(view, name) for name in FIGURES}}
    revisions["card"] = view.revision.get("result", 0)  # the card changes with the result (RunFinished)
    figures = paired(figures)
    if any(name in figures and sent is not None and sent.get(name, -1) != revisions.get(name, 0)
           for name in SOLVER_PANELS):  # one of the pair changed: redraw both from this one snapshot
        sent = {k: v for k, v in sent.items() if k not in SOLVER_PANELS} if sent is not None else None
    out: dict[str, Any] = {"status": status_markdown(view, now)}
    for name in (*FIGURES, "card", "warnings", "result", "generations"):
        if name in FIGURES and name not in figures:
            revisions[name] = (sent or {}).get(name, -1)
            continue
        if sent is not None and sent.get(name, -1) == revisions.get(name, 0):
            continue
        if name in FIGURES:
            out[name] = figure(view, name)
        elif name == "warnings":
            out[name] = warnings_text(view)
        elif name == "generations":
            out[name] = generations_html(view)
        elif name == "card":
            out[name] = card.card_markdown(view, now)
        else:
            out[name] = result_markdown(view)
        revisions.setdefault(name, 0)
    return out, revisions


def downloads(run_dir: Path, *, include_model: bool) -> list[str]:
    """Files to offer for download, copied to a temp folder.

    result.json, masks.zip, quant.zip and structure.json (when the run has them) and (when saved) model.zip.
    """
    if not (run_dir / "result.json").exists():
        return []
    target = Path(tempfile.mkdtemp(prefix=f"prunelab-{run_dir.name}-"))
    files = [shutil.copy(run_dir / "result.json", target / f"{run_dir.name}-result.json")]
    files.append(_zip(run_dir / "masks", target / f"{run_dir.name}-masks.zip"))
    if (run_dir / "quant").is_dir():
        files.append(_zip(run_dir / "quant", target / f"{run_dir.name}-quant.zip"))
    if (run_dir / "structure.json").exists():
        files.append(shutil.copy(run_dir / "structure.json", target / f"{run_dir.name}-structure.json"))
    if include_model and (run_dir / "model").is_dir():
        files.append(_zip(run_dir / "model", target / f"{run_dir.name}-model.zip"))
    return [str(f) for f in files]


def _zip(folder: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(folder.parent))
    return path
