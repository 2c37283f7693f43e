"""``measure DIR --llamacpp``: what a run's output buys where it is served, measured by llama.cpp itself.

The run is exported as GGUF (:mod:`toolkit.run.export`, its grid code for code where a block type holds
it) and its dense source as floats (F16; BF16 for a bfloat16 model:
:func:`~toolkit.models.gguf_export.native_float`), both into a temporary folder; llama.cpp
(``llama-cpp-python``, an optional extra) times batch-1 prefill and decode of both, interleaved, median
of the repeats. The rows join ``measure``'s table with the ratio model / dense, and a line says what the
output buys there.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError

ROWS = (("llama.cpp GGUF", "gguf_mib"), ("llama.cpp prefill tok/s, b1", "prefill_tps"),
        ("llama.cpp decode tok/s, b1", "decode_tps"))


def check_llamacpp(folder: Path) -> Any:
    """The export plan of the run ``folder`` names (its ``model/`` or itself), checked, and llama.cpp installed."""
    from toolkit.evaluation.llamacpp import llama_cpp
    from toolkit.run.export import ExportConfig, check_export

    llama_cpp()
    run = folder.parent if folder.name == "model" else folder
    return check_export(ExportConfig(run_dir=str(run), out=str(Path(tempfile.gettempdir()) / "prunelab-check.gguf"),
                                     force=True))


def measure_llamacpp(plan: Any, prompt_tokens: int, new_tokens: int, repeats: int, threads: int) -> dict[str, Any]:
    """Export the checked run and its dense source, time both in llama.cpp (interleaved); one record per model."""
    from toolkit.evaluation import llamacpp
    from toolkit.models.gguf_export import ExportTypes, export_gguf, native_float
    from toolkit.models.load import load_model
    from toolkit.run.export import ExportConfig, export_run

    with tempfile.TemporaryDirectory(prefix="prunelab-llamacpp-") as work:
        plan = dataclasses.replace(plan, out=Path(work) / "model.gguf")
        export_run(ExportConfig(run_dir=str(plan.record.path), out=str(plan.out)), plan)
        loaded = load_model(str(plan.record.config.get("model")))
        dense = Path(work) / "dense.gguf"
        export_gguf(loaded.model, {}, plan.source, dense, ExportTypes(native_float(loaded.model)))
        vocab = int(loaded.model.config.vocab_size)  # type: ignore[union-attr]
        prompt = [(7 * i + 11) % vocab for i in range(prompt_tokens)]  # a fixed prompt: timing needs no text
        del loaded
        speeds: dict[Path, list[Any]] = {plan.out: [], dense: []}
        for _ in range(repeats):  # interleaved: every round times both
            for path, found in speeds.items():
                found.append(llamacpp.speed(path, prompt, new_tokens, repeats=1, threads=threads))
        models = [{"gguf_mib": path.stat().st_size / 2**20,
                   "prefill_tps": statistics.median(s.prefill_tps for s in found),
                   "decode_tps": statistics.median(s.decode_tps for s in found)} for path, found in speeds.items()]
    return {"threads": threads, "models": models, "engine": f"llama.cpp (llama-cpp-python "
            f"{llamacpp.llama_cpp().__version__})"}


def llamacpp_lines(record: dict[str, Any]) -> list[str]:
    """The llama.cpp rows for ``measure``'s table (model, dense export, ratio) and what the output buys there."""
    ours, dense = record["models"]
    lines = ["", f"served by {record['engine']}, {record['threads']} thread(s), the run exported as GGUF "
             "(python -m toolkit export) beside its dense source as floats:"]
    for label, key in ROWS:
        unit = " MiB" if key == "gguf_mib" else ""
        lines.append(f"{label:<26}{ours[key]:>11.1f}{unit:<4}{dense[key]:>11.1f}{unit:<4}"
                     f"{ours[key] / dense[key]:>10.2f}")
    lines.append(f"in llama.cpp: {ours['gguf_mib'] / dense['gguf_mib']:.2f}× the bytes, decode "
                 f"{ours['decode_tps'] / dense['decode_tps']:.2f}× the dense export's tokens/s")
    return lines


def llamacpp_threads(threads: int | None) -> int:
    """The threads llama.cpp runs on: ``--threads``, else 1 (a laptop's one core; stated in the table)."""
    if threads is not None and threads < 1:
        raise ToolkitError(f"--threads must be ≥ 1, got {threads}")
    return threads or 1
