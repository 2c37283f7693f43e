"""One hostile file in the store costs one ``damaged`` row with its reason: never a hang, a crash or a blind listing.

Each case (:data:`tests.helpers.hostile_store.DAMAGE`: a status.json nested 200,000 deep, a named
pipe, a file over the size limit, a link out of the run folder, bytes that are not UTF-8, truncated
JSON) damages one run beside an intact one; the store's listing, the CLI's ``runs``, the app's Runs
table and the sweep's reuse all still find the intact run. Every listing runs in a thread joined
with a timeout, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app import runs_tab
from tests.helpers.hostile_store import CONFIG, DAMAGE, escape_named_run, make_deep, make_fifo
from tests.helpers.synthetic_runs import write_run
from toolkit.cli.main import main
from toolkit.events import RunWarning
from toolkit.store.runs import find_finished, last_stamp, list_runs, open_run

LIMIT_S = 60  # far above the milliseconds a listing takes: only a hang reaches it


def _within(call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread; fails the test when it has not returned after :data:`LIMIT_S`."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(value=call()), daemon=True)
    thread.start()
    thread.join(LIMIT_S)
    assert not thread.is_alive(), f"still reading after {LIMIT_S} s: the reader blocked"
    return box["value"]


def _needs_fifo(kind: str) -> None:
    if kind.startswith("fifo") and not hasattr(os, "mkfifo"):
        pytest.skip("named pipes are POSIX only")


@pytest.mark.parametrize("kind", DAMAGE)
def test_one_hostile_file_is_one_damaged_row(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _needs_fifo(kind)
    good = write_run(tmp_path, CONFIG, seed=0)
    victim = write_run(tmp_path, CONFIG, seed=1)
    damage, why = DAMAGE[kind]
    damage(victim)
    records = {r.path: r for r in _within(lambda: list_runs(tmp_path))}
    assert set(records) == {good, victim}
    assert records[good].status == "finished"
    assert records[victim].status == "damaged" and why in records[victim].error
    assert main(["runs", "--out", str(tmp_path)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "finished" in lines[good.name] and f"damaged: {why}" in lines[victim.name]
    table = runs_tab.runs_table(str(tmp_path))
    status = {row[runs_tab.COLUMNS.index("run id")]: row[runs_tab.COLUMNS.index("status")] for row in table["rows"]}
    assert status[good.name] == "finished" and why in status[victim.name]
    reused = find_finished(tmp_path, {"model": CONFIG["model"]})  # the sweep's reuse still sees the intact run
    assert reused is not None and reused.path == good


def test_the_replay_of_a_hostile_run_is_one_line(tmp_path: Path) -> None:
    """Opening the damaged run in the Runs tab says why; the events of a named pipe are not waited for."""
    victim = write_run(tmp_path, CONFIG, seed=1)
    make_fifo(victim, "events.jsonl")
    replay = _within(lambda: runs_tab.replay_view(victim.name, str(tmp_path)))
    assert "events.jsonl is not a regular file" in replay["status"]
    assert math.isnan(_within(lambda: last_stamp(victim)))  # the sweep's clock reads nothing from a pipe


def test_a_link_inside_the_run_folder_still_reads(tmp_path: Path) -> None:
    run = write_run(tmp_path, CONFIG, seed=0)
    (run / "result.json").rename(run / "result-copy.json")
    (run / "result.json").symlink_to("result-copy.json")
    assert open_run(run).status == "finished"


def test_a_masks_folder_linked_out_of_the_run_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path / "store", CONFIG, seed=0)
    (run / "masks").rename(tmp_path / "elsewhere")
    (run / "masks").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Exception, match="leaves the run folder"):
        open_run(run).load_mask(0, "self_attn.q_proj")


def test_a_slow_run_is_damaged_by_its_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that outlasts the run's time budget makes that run damaged; the next run has its own budget."""
    from toolkit.store import reader

    slow, good = write_run(tmp_path, CONFIG, seed=0), write_run(tmp_path, CONFIG, seed=1)
    budgets = iter([reader.Budget(-1.0), reader.Budget()])  # newest first: the first budget is already spent
    monkeypatch.setattr(reader, "Budget", lambda: next(budgets))
    records = {r.path: r for r in list_runs(tmp_path)}
    first, second = sorted(records, reverse=True)
    assert records[first].status == "damaged" and "reading the run took over" in records[first].error
    assert records[second].status == "finished" and {slow, good} == set(records)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX only")
def test_runs_from_the_shell_over_the_hostile_store(tmp_path: Path) -> None:
    """The whole hostile store through a real ``python -m toolkit runs``: exit 0, no raw escape, no hang."""
    goods = [write_run(tmp_path, CONFIG, seed=seed) for seed in range(3)]
    deep, fifo = write_run(tmp_path, CONFIG, seed=10), write_run(tmp_path, CONFIG, seed=11)
    make_deep(deep)
    make_fifo(fifo)
    named = escape_named_run(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "toolkit", "runs", "--out", str(tmp_path)], capture_output=True,
                          timeout=300, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and not proc.stderr
    assert all(f"{good.name}" in out for good in goods)
    assert "status.json nested deeper than 64 levels" in out and "status.json is not a regular file" in out
    assert "red\\r\\x07" in out and named.name not in out  # the name shown escaped, never raw


def test_a_deep_event_line_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    run = write_run(tmp_path, CONFIG, seed=0)
    first, rest = (run / "events.jsonl").read_text(encoding="utf-8").split("\n", 1)
    (run / "events.jsonl").write_text(f"{first}\n{'[' * 100_000}{']' * 100_000}\n{rest}", encoding="utf-8")
    record = open_run(run)
    assert record.status == "finished"  # the last event is still RunFinished
    warnings = [e.message for e in record.events() if isinstance(e, RunWarning)]
    assert "events.jsonl line 2 unreadable: the line nested deeper than 64 levels" in warnings


def test_the_runs_tab_shows_a_hostile_name_as_text(tmp_path: Path) -> None:
    """A folder name with markdown, HTML and an escape sequence is shown escaped in the replay's status line."""
    run = write_run(tmp_path, CONFIG, seed=0)
    name = f"{run.name}-`**b**<img src=x>`\x1b[2J"
    run.rename(run.with_name(name))
    (tmp_path / name / "events.jsonl").unlink()
    status = runs_tab.replay_view(name, str(tmp_path))["status"]
    assert "\x1b" not in status and re.search(r"(?<!\\)[<`]", status) is None and "**b**" not in status
    assert "\\`\\*\\*b\\*\\*\\<img src=x\\>\\`\\\\x1b\\[2J" in status
