"""The one door to the write side (docs/architecture.md): the CLI, the app and the widgets start and evaluate runs here.

- :class:`RunConfig`: everything a run needs, validated once; its compression fields are parsed
  objects (:mod:`toolkit.spec.compression`), built from the user's text here, at the edge.
- :func:`run`: an event generator (the engine runs in a worker thread so solver events arrive
  live); closing the generator cancels the run.
- :func:`prune_model`: the same run, drained, with an ``on_event`` callback; returns the result.
- :func:`follow`: the same run's events passed on, returning how it ended (:class:`RunOutcome`): the
  one follower of the Lesson and the sweep.
- :func:`recover_model`: a recovery fine-tune of a saved run that keeps its masks (a new, linked run).
- :func:`list_methods`, :func:`list_runs`, :func:`open_run`: registry and run store for the UIs;
  :func:`device_slot`: which physical device a job waits for.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.data.text import check_text_source
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import Event, RunFailed, RunFinished, RunStarted
from toolkit.methods import METHODS
from toolkit.models.sources import check_model_source
from toolkit.run.config import CancelToken, RunConfig
from toolkit.run.preflight import check_window
from toolkit.runtime.release import release_memory
from toolkit.spec.compression import TARGET_KINDS
from toolkit.store.runs import find_finished, list_runs, open_run

if TYPE_CHECKING:
    from toolkit.models.load import LoadedModel

__all__ = [
    "CancelToken", "RunConfig", "RunOutcome", "evaluate_model", "find_finished", "follow", "list_methods", "list_runs",
    "open_run", "prune_model", "recover_model", "run",
]


def device_slot(device: str) -> str:
    """The device a run asked for with ``device`` would prune on, as one name per physical device.

    ``auto`` is cuda when a CUDA device is available, else cpu (as the engine resolves it), and
    ``cuda`` is ``cuda:0``, so jobs that asked in different words wait for the same device. A
    name the engine would refuse is returned as given (the run itself says what is wrong).
    """
    name = (device or "auto").strip().lower()
    if name == "auto":
        import torch  # only here: resolving "auto" needs to know whether CUDA is there

        name = "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda:0" if name == "cuda" else name


def list_methods() -> list[dict[str, Any]]:
    """Every registered method, as plain data.

    Name, summary, options (name/type/default/help/choices), the sparsity
    patterns it supports (``unstructured`` | ``nm`` | ``structured``), its scope (``linear`` |
    ``block``), what it produces (``mask`` | ``quant`` | ``structure``), its structural units, and
    ``permute``: whether it takes ``--permute`` (a linear-scope method with n:m sparsity; RunConfig's rule).
    """
    return [
        {"name": spec.name, "summary": spec.summary, "options": spec.describe_options(),
         "patterns": [TARGET_KINDS[t] for t in spec.targets if t in TARGET_KINDS],
         "scope": spec.scope.value, "produces": sorted(p.value for p in spec.produces),
         "saves_quant": spec.saves_quant, "permute": spec.scope.value == "linear" and "nm" in (
             TARGET_KINDS.get(t) for t in spec.targets),
         "units": [u.value for u in spec.units],
         "defaults": {"sequential": spec.sequential, "propagate": spec.propagate}}
        for spec in METHODS.values()
    ]


def prune_model(
    config: RunConfig, *, on_event: Callable[[Event], None] | None = None, cancel: CancelToken | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run ``config`` to the end in this thread; returns the result dict (result.json).

    Raises :class:`ToolkitError` for bad input, :class:`RunCancelled` when cancelled; the run
    store marks either outcome and the model is restored. The run's memory is given back when it returns.
    """
    from toolkit.run.pipeline import execute

    try:
        return execute(config, on_event or (lambda event: None), cancel or CancelToken(), on_progress)
    finally:
        release_memory()


def run(config: RunConfig, cancel: CancelToken | None = None) -> Iterator[Event]:
    """Yield the run's events as they happen, ending with RunFinished or RunFailed.

    Bad input raises :class:`ToolkitError` before anything is written; a failure later is
    reported as a RunFailed event (the run store marks it). Closing the generator (e.g. a
    browser tab going away) cancels the run and waits for the worker to stop. However it ends, the
    run's memory is then given back (:func:`toolkit.runtime.release.release_memory`).
    """
    from toolkit.run.pipeline import execute

    token = cancel or CancelToken()
    events: queue.Queue = queue.Queue()
    done = object()
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            execute(config, events.put, token, None)
        except (ToolkitError, RunCancelled) as exc:
            failure.append(exc)
        except Exception as exc:  # reported to the consumer as RunFailed, never lost
            failure.append(exc)
        finally:
            events.put(done)

    thread = threading.Thread(target=worker, name="prunelab-run", daemon=True)
    thread.start()
    started = ended = False
    try:
        while True:
            item = events.get()
            if item is done:
                break
            started = True
            ended = item.kind in ("RunFinished", "RunFailed")
            yield item
        if failure and not started:
            raise failure[0]
    finally:
        if thread.is_alive():
            if not ended:  # closed mid-run: cancel; after the last event the worker is only tidying up
                token.cancel()
            thread.join()
        failure.clear()  # the exception's frames hold the run's model (a cycle through this list otherwise)
        release_memory()  # the run's model, activations and solver state back to the system


@dataclass(frozen=True)
class RunOutcome:
    """How one run followed by :func:`follow` ended: its first and last events, or the refusal before it started."""

    started: RunStarted | None = None
    finished: RunFinished | None = None
    failed: RunFailed | None = None
    refused: str = ""  # the ToolkitError's line when the run was refused before it started

    @property
    def run_id(self) -> str:
        """The run's folder name ("" when it never started)."""
        return self.started.run_id if self.started is not None else ""

    @property
    def status(self) -> str:
        """``finished`` | ``cancelled`` | ``failed``."""
        if self.finished is not None:
            return "finished"
        return "cancelled" if self.failed is not None and self.failed.cancelled else "failed"

    @property
    def error(self) -> str:
        """Why the run did not finish ("" when it did)."""
        if self.finished is not None:
            return ""
        return self.refused or (self.failed.error if self.failed is not None else "the run ended without a result")


def follow(config: RunConfig, cancel: CancelToken) -> Generator[Event, None, RunOutcome]:
    """Yield :func:`run`'s events and return (via StopIteration) how the run ended.

    The run's generator is always drained: closing it early would cancel the shared token. A
    :class:`ToolkitError` raised before the run started becomes :attr:`RunOutcome.refused`.
    """
    started = finished = failed = None
    try:
        for event in run(config, cancel):
            yield event
            if isinstance(event, RunStarted):
                started = event
            elif isinstance(event, RunFinished):
                finished = event
            elif isinstance(event, RunFailed):
                failed = event
    except ToolkitError as exc:
        return RunOutcome(refused=str(exc))
    return RunOutcome(started, finished, failed)


def evaluate_model(
    model: str | LoadedModel, *, data: str = "wiki", seq_len: int = 512, max_windows: int | None = None,
    device: str = "auto", encoding: str = "utf-8",
) -> tuple[float, dict[str, Any]]:
    """Perplexity of ``model`` (a name to load, or a model already loaded) on the test split of ``data``.

    The same checks as a pruning run's evaluation, before the model loads (window of ≥ 2 tokens, ≥ 1
    window, a readable model and text). Returns (ppl, protocol); raises :class:`ToolkitError` when
    ``seq_len`` exceeds the model's positions.
    """
    check_window(seq_len, max_windows)
    if isinstance(model, str):
        check_model_source(model)
    check_text_source(data, encoding)
    from toolkit.data.text import eval_windows, load_tokens
    from toolkit.evaluation.perplexity import perplexity
    from toolkit.models.load import bos_id, load_model
    from toolkit.run.checks import check_context
    from toolkit.runtime.devices import resolve_device

    dev = resolve_device(device)
    loaded = load_model(model) if isinstance(model, str) else model
    check_context(loaded, seqlen=seq_len)
    windows = eval_windows(load_tokens(data, "test", loaded.codec, encoding), seq_len, max_windows, bos_id(loaded))
    value = perplexity(loaded.model, windows, dev)
    protocol = {"model": loaded.name, "model_label": loaded.label, "dataset": data, "split": "test",
                "seqlen": seq_len, "windows": int(windows.shape[0]), "tokens": int(windows.numel())}
    return value, protocol


def recover_model(
    *, run: str | Path, on_event: Callable[[Event], None] | None = None, cancel: CancelToken | None = None,
    on_progress: Callable[[str, int, int], None] | None = None, **settings: Any,
) -> dict[str, Any]:
    """Recovery fine-tune of the saved run ``run`` (a run folder) with its keep-masks kept; returns the result dict.

    Masked LoRA (ΔW = (alpha/rank · B A) ⊙ M), or with ``train="full"`` the linears themselves
    (gradients masked), on the parent's calibration text, saved as a
    new run in the same store, linked to its parent, with perplexity before and after
    (:mod:`toolkit.run.recover`; docs/recover.md). ``settings`` are the fields of
    :class:`toolkit.run.recover_config.RecoverConfig`: ``train``, ``steps``, ``rank``, ``alpha``, ``lr``,
    ``batch_size``, ``seqlen``, ``seed``, ``eval_windows``, ``device``, ``out_dir``, ``loss``,
    ``temperature``. Raises
    :class:`ToolkitError` for bad input before any work, :class:`RunCancelled` when cancelled.
    """
    from toolkit.run.recover import recover
    from toolkit.run.recover_config import SETTINGS, RecoverConfig

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ToolkitError(f"unknown recovery setting {unknown[0]!r}: use {', '.join(SETTINGS)}")
    config = RecoverConfig(run_dir=str(run), **settings)
    try:
        return recover(config, on_event or (lambda event: None), cancel or CancelToken(), on_progress)
    finally:
        release_memory()
