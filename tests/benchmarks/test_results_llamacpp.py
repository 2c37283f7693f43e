"""docs/results.md's llama.cpp section: each model's table with its served fronts (computed) and figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import results_llamacpp
from benchmarks.results_llamacpp import render_llamacpp
from tests.helpers.records import write_jsonl

PROTOCOL = {"windows": 40, "seqlen": 512, "threads": 1, "prompt_tokens": 128, "new_tokens": 64, "repeats": 5}


def _record(label: str, kind: str, ppl: float, decode: float, mib: float, **extra: object) -> dict:
    return {"benchmark": "llamacpp", "model": "tiny", "label": label, "kind": kind, "ppl_llamacpp": ppl,
            "decode_speedup": decode, "decode_tps": 50.0 * decode, "prefill_speedup": 1.0, "prefill_tps": 400.0,
            "gguf_mib": mib, "protocol": PROTOCOL, "versions": {"llama_cpp_python": "0.3.36", "git": "abc1234"},
            "gguf_types": {"Q4_0": 7} if "int4" in label else {"F16": 7}, **extra}


RECORDS = [
    _record("dense F16", "dense", 14.0, 1.0, 260.0),
    _record("gptq int4:g32:sym", "prunelab", 16.0, 1.8, 100.0, ppl_prunelab=15.98, ppl_gap=0.00125),
    _record("rtn int4:g32:sym", "prunelab", 18.0, 1.7, 100.0, ppl_prunelab=18.0, ppl_gap=0.0),  # behind gptq
    _record("depth 4 layers", "prunelab", 20.0, 1.2, 220.0, ppl_prunelab=20.1, ppl_gap=-0.005),
    _record("llama-quantize Q4_0", "llama-quantize", 17.0, 1.9, 100.0, ftype="q4_0", gguf_types={}),
]


def test_each_output_gets_its_place_on_the_served_fronts(tmp_path: Path) -> None:
    lines = render_llamacpp([write_jsonl(tmp_path / "llamacpp_tiny.jsonl", RECORDS)])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["dense F16"].endswith("| – | yes | yes |")  # the slowest and biggest, but the best
    assert rows["gptq int4:g32:sym"].endswith("| yes | yes |")
    assert rows["rtn int4:g32:sym"].endswith("| no | no |")  # gptq is better and faster at the same bytes
    assert rows["depth 4 layers"].endswith("| no | no |")
    assert rows["llama-quantize Q4_0"].endswith("| yes | no |")  # the fastest; gptq is better at its size
    text = "\n".join(lines)
    assert "**dense F16, gptq int4:g32:sym, llama-quantize Q4_0**" in text
    assert "- On neither front: rtn int4:g32:sym, depth 4 layers." in lines
    assert "within 0.50 % of PruneLab's own" in text  # the largest |gap|: depth's
    assert lines[-1] == ("![tiny served by llama.cpp: perplexity against decode speed, marker area ∝ GGUF bytes]"
                         "(frontier_llamacpp_tiny.png)")


def test_the_figures_are_drawn_per_model_from_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results_llamacpp, "RESULTS", tmp_path)
    monkeypatch.setattr(results_llamacpp, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    assert results_llamacpp.draw_pngs() == []  # no records: nothing drawn
    write_jsonl(tmp_path / "llamacpp_tiny.jsonl", RECORDS)
    (written,) = results_llamacpp.draw_pngs()
    assert written == tmp_path / "docs" / "frontier_llamacpp_tiny.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_committed_figures_exist() -> None:
    for path in sorted(results_llamacpp.RESULTS.glob(results_llamacpp.FILES)):
        model = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["model"]
        assert results_llamacpp.png_path(model).exists(), f"run python -m benchmarks.results_doc ({model})"


def test_a_chained_run_is_labelled_with_its_parents_and_options(tmp_path: Path) -> None:
    from benchmarks.bench_llamacpp import _chain_label

    def run(name: str, method: str, label: str, model: str, options: dict) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "result.json").write_text(json.dumps({"method": method, "compression": {"label": label},
                                                        "model": model}))
        (folder / "config.json").write_text(json.dumps({"options": options}))
        return folder

    parent = run("a", "numerical", "structured:20%", "smollm2-135m", {"uniform": True, "channel_multiple": 32})
    child = run("b", "gptq", "int4:g32:sym", str(parent), {})
    assert _chain_label(parent) == "numerical structured:20% (channel_multiple=32, uniform=True)"
    assert _chain_label(child) == "numerical structured:20% (channel_multiple=32, uniform=True) → gptq int4:g32:sym"
