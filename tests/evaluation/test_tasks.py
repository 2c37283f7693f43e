"""Our offline task configs render exactly what lm-eval's installed stock tasks render on the same records."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.errors import ToolkitError
from toolkit.evaluation.tasks import (
    DEFAULT_TASKS,
    LOCAL,
    TaskSpec,
    load_local_split,
    local_folder,
    parse_task_names,
    resolve_tasks,
    stock_folder,
)

FIRST = 10  # examples rendered per task


def _stock_records(name: str) -> Any:
    """The first local validation records, in the schema the stock task reads."""
    records = load_local_split(local_folder(name))["validation"].select(range(FIRST))
    if name == "boolq":  # super_glue/boolq: label (int) and idx instead of google/boolq's answer (bool)
        records = records.map(lambda doc, i: {"label": int(doc["answer"]), "idx": i}, with_indices=True)
    return records


def _stock_task(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """lm-eval's installed definition of ``name``, with ``datasets.load_dataset`` serving the local records."""
    import lm_eval.api.task
    from lm_eval.tasks import TaskManager

    records = _stock_records(name)
    monkeypatch.setattr(lm_eval.api.task.datasets, "load_dataset",
                        lambda *args, **kwargs: {"train": records, "validation": records, "test": records})
    manager = TaskManager(include_defaults=False, include_path=str(stock_folder(name)))
    return manager.load_task_or_group([name])[name]


def _rendered(task: Any) -> tuple[list[Any], list[Any], list[Any]]:
    task.set_config(key="num_fewshot", value=0)
    task.build_all_requests(limit=FIRST, rank=0, world_size=1)
    docs = list(task.eval_docs)[:FIRST]
    return ([inst.args for inst in task.instances], [task.doc_to_target(d) for d in docs],
            [task.doc_to_choice(d) for d in docs])


@pytest.mark.parametrize("name", DEFAULT_TASKS)
def test_local_config_renders_like_the_stock_task(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.evaluation.zeroshot import build_task

    ours = build_task(TaskSpec(name, LOCAL, "validation", "acc"))
    stock = _stock_task(name, monkeypatch)
    our_requests, our_targets, our_choices = _rendered(ours)
    stock_requests, stock_targets, stock_choices = _rendered(stock)
    assert len(our_requests) >= 2 * FIRST
    assert our_requests == stock_requests  # every (context, continuation) string, in order
    assert our_targets == stock_targets
    assert our_choices == stock_choices


def test_offline_resolution_labels_the_split() -> None:
    specs = {s.name: s for s in resolve_tasks(list(DEFAULT_TASKS), LOCAL)}
    assert all(s.split == "validation" and s.source == LOCAL for s in specs.values())
    assert "lm-eval's stock arc_easy scores test" in specs["arc_easy"].note
    assert specs["boolq"].note == ""


@pytest.mark.parametrize(("text", "message"), [
    ("boolq,hellaswg", "Did you mean: hellaswag"),
    ("mmlu", "Known tasks: boolq, rte"),
    ("", "no task given"),
])
def test_bad_task_names(text: str, message: str) -> None:
    with pytest.raises(ToolkitError, match=message):
        parse_task_names(text)


def test_hub_only_task_offline_is_refused() -> None:
    with pytest.raises(ToolkitError, match="no offline data for piqa"):
        resolve_tasks("boolq,piqa", LOCAL)
