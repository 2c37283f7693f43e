"""Turn ``prune --tasks … --json`` result files into the README's zero-shot table.

    python -m benchmarks.table_zeroshot benchmarks/results/zeroshot_*.json

One row for the dense model (taken from the first file that has it) and one per pruned run, one
column per task (accuracy in %, the metric each task reports: acc or acc_norm), the mean over
tasks, and the seconds the pruned model's zero-shot took. A footer row gives the dense binomial
standard error per task, so a reader can tell a real gap from noise at the stated ``--task-limit``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def load(paths: list[str]) -> list[dict[str, Any]]:
    """The result objects that carry a ``zero_shot`` section, in the order given."""
    results = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            result = json.load(handle)
        if result.get("zero_shot"):
            results.append(result)
    return results


def _cell(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}"


def _seconds(details: dict[str, Any]) -> float:
    """Total seconds of one model's zero-shot (sum over tasks)."""
    return sum(float(task.get("seconds", 0.0)) for task in details.get("tasks", {}).values())


def table(results: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: dense first, then each pruned run; tasks in the first run's order."""
    first = results[0]["zero_shot"]
    tasks = list(first["tasks"])
    metrics = [first["tasks"][t]["metric"] for t in tasks]
    header = "| model | " + " | ".join(f"{t} ({m})" for t, m in zip(tasks, metrics, strict=True))
    lines = [header + " | mean | seconds |", "|---|" + "---|" * (len(tasks) + 2)]
    dense_details = first["details"]["dense"]
    row = " | ".join(_cell(first["dense"].get(t)) for t in tasks)
    lines.append(f"| dense | {row} | {_cell(first['mean']['dense'])} | {_seconds(dense_details):.0f} |")
    for result in results:
        shot = result["zero_shot"]
        name = f"{result['method']} {result['sparsity']}"
        row = " | ".join(_cell(shot["pruned"].get(t)) for t in tasks)
        seconds = _seconds(shot["details"]["pruned"])
        lines.append(f"| {name} | {row} | {_cell(shot['mean']['pruned'])} | {seconds:.0f} |")
    stderr = [dense_details["tasks"][t]["metrics"].get(f"{m}_stderr") for t, m in zip(tasks, metrics, strict=True)]
    lines.append("| ± stderr (dense) | " + " | ".join(_cell(s) for s in stderr) + " | | |")
    return lines


def main(argv: list[str]) -> int:
    results = load(argv)
    if not results:
        print("error: none of these files has a zero_shot section; run `prune … --tasks … --json FILE`")
        return 2
    limit = results[0]["zero_shot"].get("limit")
    print(f"examples per task: {limit if limit else 'all'}; shots 0; {results[0]['model']}")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
