"""The teacher of a distillation recovery (``recover --loss kd | kd+lm``): the parent run's source model.

The parent's config.json names the model it pruned (``model``); that model is loaded, checked to
share the student's tokenizer (the same vocabulary, token for token) and returned in eval mode with
no gradients. Every check raises one :class:`ToolkitError` line before the new run folder exists.
:func:`teacher_loss` gives the training loop its step loss (:func:`toolkit.engine.distill.step_loss`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.distill import step_loss
from toolkit.errors import ToolkitError
from toolkit.models.load import LoadedModel, load_model
from toolkit.models.sources import check_model_source
from toolkit.run.recover_config import ParentRun, RecoverConfig


def load_teacher(config: RecoverConfig, parent: ParentRun, student: LoadedModel) -> nn.Module | None:
    """The parent's source model for ``--loss kd | kd+lm`` (None for ``lm``), checked against ``student``."""
    if config.loss == "lm":
        return None
    name = str(parent.config.get("model") or "")
    try:
        check_model_source(name)
    except ToolkitError as exc:
        raise ToolkitError(f"--loss {config.loss} distils from the parent's source model {name!r}, which cannot be "
                           f"found here ({exc}); run recover where that model is, or use --loss lm") from None
    teacher = load_model(name)
    if _vocabulary(teacher) != _vocabulary(student):
        raise ToolkitError(f"the parent's source model {name!r} does not share the tokenizer of run "
                           f"{parent.run_id}'s model; distillation needs the same vocabulary: use --loss lm")
    if getattr(teacher.model.config, "final_logit_softcapping", None) is not None:
        raise ToolkitError(f"{name!r} caps its logits (final_logit_softcapping), which the chunked distillation "
                           "does not model; use --loss lm")
    teacher.model.requires_grad_(False)
    return teacher.model.eval()


def teacher_loss(teacher: nn.Module | None, config: RecoverConfig,
                 device: torch.device) -> Callable[[nn.Module, Tensor], Tensor] | None:
    """The step loss of ``config.loss`` with ``teacher`` moved to ``device``; None for ``lm`` (the model's own)."""
    if teacher is None:
        return None
    teacher.to(device)
    return step_loss(teacher, config.loss, temperature=config.temperature)


def _vocabulary(loaded: LoadedModel) -> tuple[Any, int]:
    """The tokenizer's token → id map (None for the byte codec) and the embedding rows."""
    tokenizer = getattr(loaded.codec, "tokenizer", None)
    model: Any = loaded.model
    rows = int(model.get_input_embeddings().weight.shape[0])
    return (tokenizer.get_vocab() if tokenizer is not None else type(loaded.codec).__name__), rows
