"""The app under load: five sessions submit runs at once; each sees its own place in the queue, all end
cleanly (four finish, one is cancelled while waiting), and the run store holds exactly those runs, undamaged."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app import run_tab
from tests.app.test_app import settings
from toolkit.store.runs import list_runs

SESSIONS = 5


@pytest.mark.slow
def test_five_sessions_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_tab, "PERIOD", 0.05)
    statuses: dict[int, list[str]] = {i: [] for i in range(SESSIONS)}
    cancelled = threading.Event()

    def session(index: int) -> None:
        stream = run_tab.run_stream(settings(protocol=settings().protocol), runs_dir=str(tmp_path),
                                    session=f"load-{index}")
        for update in stream:
            statuses[index].append(update.get("status", ""))
            if index == SESSIONS - 1 and "queued" in statuses[index][-1] and not cancelled.is_set():
                cancelled.set()
                stream.close()  # this tab is closed while waiting: it leaves the queue
                return

    threads = [threading.Thread(target=session, args=(i,)) for i in range(SESSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    positions = {pos for lines in statuses.values() for line in lines if "position" in line
                 for pos in [int(line.split("position ")[1].split()[0])]}
    assert max(positions) >= 2  # the queue was shared and each session saw where it stood
    finished = [i for i, lines in statuses.items() if any("finished" in line for line in lines)]
    assert len(finished) == SESSIONS - 1 and SESSIONS - 1 not in finished
    records = list_runs(tmp_path)
    assert len(records) == SESSIONS - 1 and {r.status for r in records} == {"finished"}
