"""Knowledge-distillation loss: KL from the teacher's to the student's next tokens, chunked over the vocabulary.

For hidden states h_s (student) and h_t (teacher) of the same tokens, output matrices W_s, W_t
(vocab, hidden) and temperature T, with z = h Wᵀ the logits:

    log p(v) = z_v / T − logsumexp_u(z_u / T)
    KD = T² · mean over positions of Σ_v p_t(v) · (log p_t(v) − log p_s(v))

(Hinton et al.'s soft-target loss; T² keeps the gradient's scale as T changes). The logits are never
built for the whole vocabulary at once: the vocabulary is cut into chunks of ``chunk`` rows of W, a
first sweep accumulates both log-normalisers (a running logsumexp), a second sums the KL terms. Each
chunk of the student runs under activation checkpointing, so the backward pass recomputes its logits
instead of keeping them: memory holds one (positions, chunk) block at a time, never (positions, vocab).
The teacher runs without gradients; its logits are computed per batch and never stored.

:func:`step_loss` makes the loss of one training step for :func:`toolkit.engine.finetune.train`
(``TrainSettings.loss_fn``): ``kd``, ``lm`` (the causal-LM loss, mean NLL of each next token, computed
from the same chunks at T = 1) or ``kd+lm`` (their sum). The hidden states are the models' own
outputs with the output layer swapped for an identity while they run (:func:`hidden_states`, restored
in ``finally``), so no model builds its full logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from toolkit.errors import ToolkitError

LOSSES = ("lm", "kd", "kd+lm")  # the language-model loss, distillation, or their sum
TEMPERATURE = 2.0
VOCAB_CHUNK = 8192  # rows of the output matrix per chunk


def check_kd(loss: str, temperature: float, chunk: int = VOCAB_CHUNK) -> None:
    """Raise :class:`ToolkitError` for an unknown loss, a temperature ≤ 0 or a chunk < 1."""
    if loss not in LOSSES:
        raise ToolkitError(f"unknown --loss {loss!r}: use one of {', '.join(LOSSES)}")
    if not temperature > 0:
        raise ToolkitError(f"--temperature must be > 0, got {temperature}")
    if chunk < 1:
        raise ToolkitError(f"the vocabulary chunk must be ≥ 1, got {chunk}")


def kd_loss(student_hidden: Tensor, student_head: Tensor, teacher_hidden: Tensor, teacher_head: Tensor, *,
            temperature: float = TEMPERATURE, chunk: int = VOCAB_CHUNK) -> Tensor:
    """The KD loss of the module docstring, a scalar with gradients into the student's tensors.

    ``*_hidden``: (positions, hidden) final hidden states (after the final norm); ``*_head``: (vocab,
    hidden) output matrices (the two vocabularies must be the same size). Computed in float32.
    """
    if student_head.shape[0] != teacher_head.shape[0]:
        raise ToolkitError(f"the student's vocabulary ({student_head.shape[0]}) and the teacher's "
                           f"({teacher_head.shape[0]}) differ: the teacher must share the tokenizer")
    with torch.no_grad():
        teacher_lse = _lse(teacher_hidden, teacher_head, temperature, chunk)
    student_lse = _lse(student_hidden, student_head, temperature, chunk)
    total = student_hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, student_head.shape[0], chunk):
        with torch.no_grad():
            log_pt = _scaled(teacher_hidden, teacher_head[start:start + chunk], temperature) - teacher_lse[:, None]
        total = total + checkpoint(_kl_chunk, student_hidden, student_head[start:start + chunk], student_lse,
                                   log_pt, torch.tensor(temperature), use_reentrant=False)
    return total * temperature**2 / student_hidden.shape[0]


def _scaled(hidden: Tensor, head: Tensor, temperature: float) -> Tensor:
    """(positions, chunk) logits / T in float32."""
    return (hidden.float() @ head.float().T) / temperature


def _lse(hidden: Tensor, head: Tensor, temperature: float, chunk: int) -> Tensor:
    """(positions,) logsumexp over the whole vocabulary of logits / T, one chunk at a time."""
    parts = [checkpoint(_chunk_lse, hidden, head[start:start + chunk], torch.tensor(temperature), use_reentrant=False)
             for start in range(0, head.shape[0], chunk)]
    return torch.logsumexp(torch.stack(parts, dim=-1), dim=-1)


def _chunk_lse(hidden: Tensor, head: Tensor, temperature: Tensor) -> Tensor:
    return torch.logsumexp(_scaled(hidden, head, float(temperature)), dim=-1)


def _kl_chunk(hidden: Tensor, head: Tensor, lse: Tensor, log_pt: Tensor, temperature: Tensor) -> Tensor:
    """Σ over the chunk's tokens and the positions of p_t · (log p_t − log p_s)."""
    log_ps = _scaled(hidden, head, float(temperature)) - lse[:, None]
    return (log_pt.exp() * (log_pt - log_ps)).sum()


def step_loss(teacher: nn.Module, loss: str, *, temperature: float = TEMPERATURE,
              chunk: int = VOCAB_CHUNK) -> Callable[[nn.Module, Tensor], Tensor]:
    """The loss of one step of ``model`` on ``batch`` (batch, seq) int64: ``kd``, ``lm`` or ``kd+lm``.

    ``teacher`` stays in eval mode, without gradients, on the device of the batch.
    """
    check_kd(loss, temperature, chunk)

    def compute(model: nn.Module, batch: Tensor) -> Tensor:
        hidden, head = hidden_states(model, batch)
        total = hidden.new_zeros((), dtype=torch.float32)
        if "lm" in loss.split("+"):
            total = total + lm_loss(hidden[:, :-1].reshape(-1, hidden.shape[-1]), head, batch[:, 1:].reshape(-1),
                                    chunk=chunk)
        if "kd" in loss.split("+"):
            with torch.no_grad():
                teacher_hidden, teacher_head = hidden_states(teacher, batch)
            total = total + kd_loss(hidden.reshape(-1, hidden.shape[-1]), head,
                                    teacher_hidden.reshape(-1, teacher_hidden.shape[-1]), teacher_head,
                                    temperature=temperature, chunk=chunk)
        return total

    return compute


def lm_loss(hidden: Tensor, head: Tensor, targets: Tensor, *, chunk: int = VOCAB_CHUNK) -> Tensor:
    """Mean NLL of ``targets`` (positions,) given ``hidden`` (positions, hidden) and ``head`` (vocab, hidden)."""
    target_logits = (hidden.float() * head[targets].float()).sum(-1)  # (positions,)
    return (_lse(hidden, head, 1.0, chunk) - target_logits).mean()


def hidden_states(model: nn.Module, batch: Tensor) -> tuple[Tensor, Tensor]:
    """(final hidden states (batch, seq, hidden), output matrix (vocab, hidden)) of a causal LM on ``batch``."""
    base: Any = model
    head = base.get_output_embeddings()
    with _identity_head(model, head):
        hidden = model(input_ids=batch, use_cache=False).logits
    return hidden, head.weight


@contextmanager
def _identity_head(model: nn.Module, head: nn.Module) -> Iterator[None]:
    """The output layer swapped for an identity (and no logit soft-capping) while the block runs."""
    parent, name = next((m, n) for m in model.modules() for n, child in m.named_children() if child is head)
    config = getattr(model, "config", None)
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is not None:
        raise ToolkitError("distillation of a model with final logit soft-capping is not supported")
    setattr(parent, name, nn.Identity())
    try:
        yield
    finally:
        setattr(parent, name, head)
