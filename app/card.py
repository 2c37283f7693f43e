"""The answer of a finished run, first: the result card at the top of the Run tab and the status line's end.

Pure functions of a folded :class:`~toolkit.live.view.RunView` (no Gradio). The card says, in one
table and one sentence, what a teacher asks first and a researcher checks: dense → compressed
perplexity with the change, the sparsity achieved (or the bits per weight of a quantized run), the
weights kept, the bytes the model takes as the run saves it (result.json's ``bought``, built by
:mod:`toolkit.run.bought`), the decode speed where the model shrank, and the time. A run recorded
before the ``bought`` record existed gets the accounting's numbers instead.
"""

from __future__ import annotations

import math
from typing import Any

from toolkit.live.phase import format_seconds
from toolkit.live.recovery import RecoveryView
from toolkit.live.view import RunView

NOT_SMALLER = "not smaller as saved: pruned weights are stored as zeros in a dense checkpoint"


def percent_change(dense: float, compressed: float) -> str:
    """``+149%`` (whole percent from 10 % on), ``+2.4%`` below; "" when either is unknown."""
    if not (math.isfinite(dense) and math.isfinite(compressed)) or not dense:
        return ""
    change = compressed / dense - 1
    return f"{change:+.0%}" if round(abs(change), 3) >= 0.1 else f"{change:+.1%}"


def perplexities(view: RunView) -> tuple[str, float, float]:
    """(dataset, dense, compressed) of the first dataset measured; nan where not measured, ("", nan, nan) for none."""
    names = list(dict.fromkeys([*view.dense_ppl, *view.ppl]))
    if not names:
        return "", math.nan, math.nan
    return names[0], view.dense_ppl.get(names[0], math.nan), view.ppl.get(names[0], math.nan)


def ppl_text(view: RunView, digits: int = 2) -> str:
    """``17.47 → 43.58 (+149%)``; one side only when the other was not measured; "" when none was."""
    _, dense, compressed = perplexities(view)
    if not math.isfinite(compressed):
        return ""
    change = percent_change(dense, compressed)
    head = f"{dense:.{digits}f} → " if math.isfinite(dense) else ""
    return f"{head}{compressed:.{digits}f}" + (f" ({change})" if change else "")


def elapsed_text(view: RunView, now: float) -> str:
    """The run's time (``3 min 20 s``, ``4.2 s``) start to end; ``pruning 4.2 s`` when no clock saw it.

    A replay of a run stored before its events were stamped has no start: only its prune time is known,
    and it is named as such (the status line says ``elapsed not recorded``).
    """
    if not math.isfinite(view.started_at):
        return f"pruning {format_seconds(view.prune_seconds, tenths=True)}"
    return format_seconds(view.elapsed(now), tenths=True)


def headline(view: RunView, now: float) -> str:
    """The end of a finished run's status line: ``ppl 17.47 → 43.58 (+149%) · 3 min 20 s``."""
    ppl = ppl_text(view)
    return " · ".join(part for part in (f"ppl {ppl}" if ppl else "", elapsed_text(view, now)) if part)


def count(number: float) -> str:
    """``135.8 M``, ``36.9 k``, ``512``."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if number >= size:
            return f"{number / size:.1f} {unit}"
    return f"{number:.0f}"


def size(number: float) -> str:
    """``513.1 MiB``, ``1.27 GiB``, ``417.8 KiB``."""
    if number >= 2**30:
        return f"{number / 2**30:.2f} GiB"
    if number >= 2**20:
        return f"{number / 2**20:.1f} MiB"
    return f"{number / 2**10:.1f} KiB"


def card_markdown(view: RunView, now: float) -> str:
    """The result card of a finished run (Markdown); "" for a run that did not finish."""
    if view.status != "finished":
        return ""
    dataset, _, _ = perplexities(view)
    evaluation = view.protocol.get("evaluation") or {}
    where = f", {evaluation.get('windows', '?')} × {evaluation.get('seqlen', '?')} tokens" if evaluation else ""
    columns = [(f"perplexity ({dataset}{where})" if dataset else "perplexity",
                f"**{ppl_text(view)}**" if ppl_text(view) else "not evaluated")]
    if view.compression.get("sparsity") or not view.compression.get("quant"):
        columns.append(("sparsity achieved", f"**{_num(view.achieved_sparsity, '.2%')}**"))
    if view.compression.get("quant"):
        columns.append(("bits per weight", f"**{_num(view.bits_per_weight, '.2f')}** (scales counted)"))
    columns += _bought_columns(view)
    if not math.isfinite(view.started_at):  # an older run's replay: its prune time, the elapsed time not recorded
        columns.append(("time", f"{elapsed_text(view, now)} (elapsed not recorded)"))
    else:
        prune = f" (pruning {format_seconds(view.prune_seconds, tenths=True)})" \
            if math.isfinite(view.prune_seconds) else ""
        columns.append(("time", f"{elapsed_text(view, now)}{prune}"))
    table = ["| " + " | ".join(name for name, _ in columns) + " |", "|" + "---|" * len(columns),
             "| " + " | ".join(value for _, value in columns) + " |"]
    return "\n".join([*table, "", bought_sentence(view)])


def _bought_columns(view: RunView) -> list[tuple[str, str]]:
    bought = view.bought
    before, after = view.params
    if bought is None:  # recorded before the bought record: what the accounting has
        kept = [("linear weights", f"{count(after)} of {count(before)}")] if before else []
        return kept + ([("size (estimate)", size(view.estimated_bytes))] if view.estimated_bytes else [])
    columns = [("linear weights kept", f"{count(bought['kept_weights'])} of {count(bought['params_before'])}"),
               ("size as saved", f"{size(bought['bytes_stored'])} (dense {size(bought['bytes_dense'])})")]
    speed = bought.get("speed")
    if speed:
        columns.append((f"decode tokens/s ({speed['device']}, batch {speed['batch']})",
                        f"{speed['dense_tokens_per_s']:.1f} → **{speed['tokens_per_s']:.1f}**"))
        columns += [(f"decode tokens/s, batch {new['batch']} (prefill excluded)",
                     f"{dense['decode_tokens_per_s']:.1f} → **{new['decode_tokens_per_s']:.1f}**")
                    for dense, new in zip(speed.get("dense_by_batch", []), speed.get("by_batch", []), strict=False)
                    if new["batch"] != speed["batch"]]
    return columns


def bought_sentence(view: RunView | RecoveryView) -> str:
    """One plain sentence: what the compression bought as the run (a prune run or a recovery) saves the model."""
    bought: dict[str, Any] | None = view.bought
    if bought is None:
        return "*This run was recorded before PruneLab measured what a compression buys.*"
    stored, dense = bought["bytes_stored"], bought["bytes_dense"]
    how = "measured on disk" if bought["bytes_measured"] else "computed; measured when the checkpoint is saved"
    if bought["stored_as"] == "dense":
        return (f"**What it bought**: {count(bought['kept_weights'])} of {count(bought['params_before'])} weights "
                f"kept, but **{NOT_SMALLER}**, and no faster: its zeros are multiplied like any other weight "
                f"({size(stored)}, {how}).")
    share = f"{stored / dense:.0%} of the dense {size(dense)}" if dense else size(stored)
    if bought["stored_as"] == "pack-quantized":
        return (f"**What it bought**: stored packed (codes, scales and zero points), {size(stored)}: {share} "
                f"({how}).")
    text = (f"**What it bought**: heads and channels removed, the matrices are smaller: {size(stored)}, {share} "
            f"({how})")
    speed = bought.get("speed")
    if speed:
        ratio = speed["tokens_per_s"] / speed["dense_tokens_per_s"] if speed["dense_tokens_per_s"] else math.nan
        text += (f"; greedy decoding {speed['dense_tokens_per_s']:.1f} → {speed['tokens_per_s']:.1f} tokens/s "
                 f"(×{ratio:.2f}; {speed['device']}, batch {speed['batch']}, {speed['new_tokens']} new tokens, "
                 "measured in this run)")
    return text + "."


def _num(value: float, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and math.isfinite(value) else "–"
