"""Checks of a run's settings against the loaded model, made before anything runs.

A sequence longer than the model's positions is never a result: a learned position table (OPT,
GPT-2) fails with an IndexError, possibly after a whole pruning run; a rotary model (Llama,
SmolLM2) returns a perplexity from positions it was never trained on, after minutes or hours of
a single window.
"""

from __future__ import annotations

from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.load import LoadedModel

_CONFIG_LIMITS = ("max_position_embeddings", "n_positions", "n_ctx")
_POSITION_TABLES = ("embed_positions", "wpe")  # OPT, GPT-2: learned absolute positions


def max_positions(model: nn.Module) -> int | None:
    """The longest sequence ``model`` has positions for, or None when nothing says.

    The smallest of the config's ``max_position_embeddings`` / ``n_positions`` / ``n_ctx`` and of
    the rows of a learned position table (less OPT's ``offset`` of 2 rows). A sliding window
    (Gemma-2/3, Mistral) is not a limit: those layers attend to the last W tokens of any sequence
    up to ``max_position_embeddings``.
    """
    config = getattr(model, "config", None)
    limits = [value for name in _CONFIG_LIMITS if isinstance(value := getattr(config, name, None), int) and value > 0]
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in _POSITION_TABLES and isinstance(module, nn.Embedding):
            limits.append(module.num_embeddings - int(getattr(module, "offset", 0)))
    return min(limits) if limits else None


def check_context(loaded: LoadedModel, seqlen: int | None = None, eval_seqlen: int | None = None) -> None:
    """Raise :class:`ToolkitError` when a sequence length exceeds the positions of ``loaded``.

    The lengths are ``seqlen`` (calibration, or the eval command's window) and ``eval_seqlen``; None skips a
    length.
    """
    limit = max_positions(loaded.model)
    if limit is None:
        return
    for flag, value in (("--seqlen", seqlen), ("--eval-seqlen", eval_seqlen)):
        if value is not None and value > limit:
            raise ToolkitError(f"{flag} {value} exceeds {loaded.name}'s {limit} positions; use at most {limit}")
