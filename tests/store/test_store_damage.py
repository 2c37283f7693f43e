"""Every reader of the run store is total: each kind of damage degrades one row, never the listing.

Each case builds a finished run beside an intact one, damages one file the way a crash, a full disk,
an editor or another program would, and checks the store API, ``python -m toolkit runs``, the app's
Runs table and replay, and the Compare tab.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from app import compare_tab, runs_tab
from tests.helpers.synthetic_runs import write_run
from toolkit.cli.main import main
from toolkit.store.runs import list_runs, open_run

CONFIG = {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}


def _write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        (path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return damage


def _remove(name: str) -> Callable[[Path], None]:
    return lambda path: (path / name).unlink()


def _directory(name: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        (path / name).unlink()
        (path / name).mkdir()
    return damage


def _truncate(name: str, keep: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = (path / name).read_bytes()
        (path / name).write_bytes(data[: len(data) - keep] if keep > 0 else data[:-keep])
    return damage


def _remove_mask(path: Path) -> None:
    next((path / "masks").glob("*.npz")).unlink()


DAMAGE = {
    "config-bad-json": (_write("config.json", "{"), "config.json is not valid JSON"),
    "config-list": (_write("config.json", "[]"), "config.json holds a list"),
    "config-null": (_write("config.json", "null"), "config.json holds null"),
    "config-non-utf8": (_write("config.json", b'{"model": "\xff\xfe"}'), "config.json is not UTF-8"),
    "config-missing": (_remove("config.json"), "config.json is missing"),
    "config-directory": (_directory("config.json"), "config.json is a directory"),
    "config-wrong-type": (_write("config.json", '{"model": ["a"], "method": "wanda"}'), "'model' is a list"),
    "status-list": (_write("status.json", "[]"), "status.json holds a list"),
    "status-null": (_write("status.json", "null"), "status.json holds null"),
    "status-half-written": (_write("status.json", ""), "status.json is empty"),
    "status-pid-text": (_write("status.json", '{"status": "finished", "pid": "abc"}'), "pid 'abc'"),
    "status-unknown": (_write("status.json", '{"status": "done"}'), "status 'done'"),
    "result-list": (_write("result.json", "[]"), "result.json holds a list"),
    "result-ppl-null": (_write("result.json", '{"ppl": null}'), "'ppl' is null"),
    "result-ppl-text": (_write("result.json", '{"ppl": {"wiki": "low"}}'), "ppl['wiki'] is a string"),
    "result-truncated": (_truncate("result.json", 20), "result.json is not valid JSON"),
    "result-missing": (_remove("result.json"), "result.json is missing"),
    "events-truncated": (_truncate("events.jsonl", 30), "events.jsonl ends with EvalPoint, not RunFinished"),
    "events-missing": (_remove("events.jsonl"), "events.jsonl is missing"),
    "mask-deleted": (_remove_mask, "1 of 4 mask files are missing"),
}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(root, intact run, run to damage): two finished runs of one model."""
    good = write_run(tmp_path, CONFIG, seed=0)
    victim = write_run(tmp_path, CONFIG, seed=1)
    return tmp_path, good, victim


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_degrades_one_row(kind: str, store: tuple[Path, Path, Path], capsys: pytest.CaptureFixture) -> None:
    root, good, victim = store
    damage, why = DAMAGE[kind]
    damage(victim)
    records = {r.path: r for r in list_runs(root)}
    assert set(records) == {good, victim}
    assert records[good].status == "finished"
    assert records[victim].status == "damaged" and why in records[victim].error
    assert open_run(victim).status == "damaged"  # the listing and the replay agree
    assert main(["runs", "--out", str(root)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "finished" in lines[good.name] and "damaged: " in lines[victim.name] and why in lines[victim.name]
    table = runs_tab.runs_table(str(root))
    key, column = runs_tab.COLUMNS.index("run id"), runs_tab.COLUMNS.index("status")
    status = {row[key]: row[column] for row in table["rows"]}
    assert status[good.name] == "finished" and status[victim.name].startswith("damaged: ")
    assert "1 damaged" in table["message"]
    replay = runs_tab.replay_view(victim.name, str(root))
    assert "damaged" in replay["status"]
    assert [run_id for _, run_id in compare_tab.run_choices(str(root))] == [good.name]
    refused = compare_tab.compare_view([good.name, victim.name], "0", "self_attn.q_proj", 4, str(root))
    assert "damaged" in refused["message"]


@pytest.mark.parametrize("pid", [None, 0, 1, 2**40, -5])
def test_running_without_a_usable_pid_is_interrupted(pid: int | None, store: tuple[Path, Path, Path]) -> None:
    root, _, victim = store
    _truncate("events.jsonl", 30)(victim)  # the run stopped before its last event
    status = {"status": "running", "error": ""} | ({} if pid is None else {"pid": pid})
    (victim / "status.json").write_text(json.dumps(status))
    record = open_run(victim)
    assert record.status == "interrupted" and "no valid pid" in record.error
    replay = runs_tab.replay_view(victim.name, str(root))["status"]
    assert "interrupted" in replay and "no valid pid" in replay  # the Runs tab says what the listing says


@pytest.mark.parametrize("pid", [None, 1, 2**40])
def test_a_run_whose_last_event_is_run_finished_is_finished_whatever_status_says(
        pid: int | None, store: tuple[Path, Path, Path]) -> None:
    """Only the final status write was lost: the listing and the replay both say finished."""
    root, _, victim = store
    status = {"status": "running", "error": ""} | ({} if pid is None else {"pid": pid})
    (victim / "status.json").write_text(json.dumps(status))
    record = open_run(victim)
    assert record.status == "finished" and record.result is not None
    assert "finished" in runs_tab.replay_view(victim.name, str(root))["status"]


def test_permission_denied_is_one_damaged_row(store: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, good, victim = store
    real = os.open

    def refuse(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if Path(path) == victim / "result.json":
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)  # as a chmod 000 would, also where the tests run as root
    records = {r.path: r for r in list_runs(root)}
    assert records[good].status == "finished"
    assert records[victim].status == "damaged" and "permission denied" in records[victim].error


def test_junk_mask_is_a_message(store: tuple[Path, Path, Path]) -> None:
    root, good, victim = store
    (victim / "masks" / "L000__self_attn.q_proj.npz").write_bytes(b"PK\x03\x04 not a zip")
    view = compare_tab.compare_view([good.name, victim.name], "0", "self_attn.q_proj", 4, str(root))
    assert "mask file L000__self_attn.q_proj.npz is damaged" in view["message"]


def test_foreign_files_are_not_runs(store: tuple[Path, Path, Path]) -> None:
    root, _, victim = store
    (root / "notes.txt").write_text("mine")
    (root / "empty").mkdir()
    (victim / "masks" / "Lxyz__odd.npz").write_bytes(b"")
    records = {r.path.name: r for r in list_runs(root)}
    assert records["empty"].status == "damaged" and "config.json is missing" in records["empty"].error
    assert "notes.txt" not in records
    assert (0, "self_attn.q_proj") in open_run(victim).mask_names()


def test_runs_on_a_missing_store_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["runs", "--out", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: run store") and "does not exist" in err[0]
    assert main(["runs", "--out", str(tmp_path)]) == 0
    assert "no runs in" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX only")
def test_unlistable_store_gives_empty_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def iterdir(self: Path) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "iterdir", iterdir)
    assert list_runs(tmp_path) == []
