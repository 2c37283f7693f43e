"""What each output buys where it is served: PruneLab's GGUF exports measured by llama.cpp itself (prints JSON).

For one embedded model: the dense model exported as F16, every ``--runs`` folder exported with
``python -m toolkit export`` (its own grid, code for code where a GGUF block type holds it), and
llama.cpp's own quantizer (``llama-quantize``, here ``llama_model_quantize``) applied to the dense
export for the head-to-head at four bits (token embedding and output head kept at F16 as in PruneLab's
exports, so the decoder linears alone differ), and with ``--llama-bin`` the same types quantized with an
importance matrix that ``llama-imatrix`` computed on PruneLab's calibration windows (its tools are not in
the Python package: build them from the llama.cpp sources it vendors, docs/serving.md). Then, through
``llama-cpp-python`` on ``--threads`` threads:

- perplexity on PruneLab's own windows (the first ``--windows`` wiki test windows of ``--seqlen``
  tokens, the same ids, BOS where the model takes it), beside PruneLab's own figure of the same windows
  (a run's result.json; the dense model evaluated here);
- batch-1 prefill and decode tokens/s, interleaved: every repeat measures every model once in turn,
  and the medians are reported, with the ratio to the dense export (F16; BF16 for a bfloat16 model, as the runs export).

    python -m benchmarks.bench_llamacpp --model smollm2-135m --runs runs/A runs/B \
        --quantizers q4_0,q4_1,q4_k_m --json benchmarks/results/llamacpp_smollm2.jsonl

Needs the optional extra: ``.venv/bin/pip install -r requirements-llamacpp.txt``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.records import emit


@dataclass
class Entry:
    """One GGUF to measure and what is known of it before llama.cpp runs."""

    label: str
    kind: str  # dense | prunelab | llama-quantize
    path: Path
    facts: dict[str, Any] = field(default_factory=dict)
    speeds: list[Any] = field(default_factory=list)


def _run_entry(run: Path, work: Path, windows: int, seqlen: int) -> Entry:
    """Export a run folder and read its protocol and PruneLab perplexity (refused when the windows differ)."""
    from toolkit.run.export import ExportConfig, check_export, export_run

    result = json.loads((run / "result.json").read_text())
    evaluation = result["protocol"]["evaluation"]
    if evaluation["seqlen"] != seqlen or evaluation["windows"] != windows:
        raise SystemExit(f"{run}: evaluated on {evaluation['windows']} windows of {evaluation['seqlen']}, not "
                         f"{windows} of {seqlen}: rerun it with --eval-windows {windows} --eval-seqlen {seqlen}")
    config = ExportConfig(run_dir=str(run), out=str(work / f"{run.name}.gguf"), force=True)
    start = time.perf_counter()
    report = export_run(config, check_export(config))
    label = _chain_label(run)
    facts = {"method": result["method"], "compression": result["compression"]["label"], "run_dir": str(run),
             "options": dict(result.get("options", {})),
             "ppl_prunelab": result["ppl"].get("wiki"), "solve_seconds": round(result["prune_seconds"], 2),
             "gguf_types": report.types, "exact_linears": report.exact,
             "requant_error_max": report.requant_error(), "export_seconds": round(time.perf_counter() - start, 2)}
    return Entry(label, "prunelab", report.path, facts)


def _chain_label(run: Path, depth: int = 0) -> str:
    """``method compression (options set)`` of a run, after its parent's when it compressed another run's model."""
    result = json.loads((run / "result.json").read_text())
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").is_file() else {}
    chosen = ", ".join(f"{key}={value}" for key, value in sorted((config.get("options") or {}).items()))
    own = f"{result['method']} {result['compression']['label']}" + (f" ({chosen})" if chosen else "")
    parent = Path(str(result.get("model", "")))
    if depth < 8 and (parent / "result.json").is_file():
        return f"{_chain_label(parent, depth + 1)} → {own}"
    return own


def _dense_entries(model: str, work: Path, quantizers: list[str], threads: int) -> tuple[list[Entry], Any]:
    """The dense export (F16, BF16 for a bfloat16 model as the runs' exports) and llama.cpp's own quantizations
    of it; returns them and the loaded model."""
    from toolkit.evaluation import llamacpp
    from toolkit.models.gguf_export import ExportTypes, export_gguf, native_float
    from toolkit.models.load import load_model
    from toolkit.run.export import source_gguf

    loaded = load_model(model)
    floats = native_float(loaded.model)  # as the runs' exports
    dense = work / f"{model}-{floats}.gguf"
    report = export_gguf(loaded.model, {}, source_gguf(model), dense, ExportTypes(floats))
    entries = [Entry(f"dense {floats.upper()}", "dense", dense, {"gguf_types": report.types})]
    for ftype in quantizers:
        out = work / f"{model}-llama-quantize-{ftype}.gguf"
        start = time.perf_counter()
        llamacpp.quantize(dense, out, ftype, threads=threads)
        entries.append(Entry(f"llama-quantize {ftype.upper()}", "llama-quantize", out,
                             {"ftype": ftype, "solve_seconds": round(time.perf_counter() - start, 2),
                              "embedding": "F16 (kept, as PruneLab's exports)", "imatrix": False}))
    return entries, loaded


def calibration_text(loaded: Any, path: Path, nsamples: int, seqlen: int, seed: int) -> Path:
    """PruneLab's calibration windows (wiki train, ``nsamples`` × ``seqlen``, ``seed``) decoded and joined, for
    ``llama-imatrix`` (which tokenizes the file again and cuts it into chunks of its context)."""
    from toolkit.data.text import CalibSpec, calibration_windows, load_tokens

    windows = calibration_windows(load_tokens("wiki", "train", loaded.codec), CalibSpec("wiki", nsamples, seqlen, seed))
    path.write_text("\n\n".join(loaded.codec.tokenizer.decode(w) for w in windows.tolist()), encoding="utf-8")
    return path


def imatrix_entries(dense: Path, calib: Path, work: Path, quantizers: list[str], args: argparse.Namespace
                    ) -> list[Entry]:
    """``llama-imatrix`` on the calibration text, then ``llama-quantize --imatrix`` into each type (embedding and
    output head kept at F16, as in PruneLab's exports). The binaries come from ``--llama-bin``: llama.cpp's tools,
    built from the sources llama-cpp-python vendors (docs/serving.md)."""
    import subprocess

    bin_dir, chunks, seqlen, threads = Path(args.llama_bin), args.nsamples, args.calib_seqlen, args.threads
    matrix = work / "imatrix.gguf"
    start = time.perf_counter()
    subprocess.run([str(bin_dir / "llama-imatrix"), "-m", str(dense), "-f", str(calib), "-o", str(matrix), "-c",
                    str(seqlen), "--chunks", str(chunks), "-t", str(threads), "-ngl", "0"], check=True,
                   capture_output=True)
    matrix_seconds = time.perf_counter() - start
    entries = []
    for ftype in quantizers:
        out = work / f"{dense.stem}-imatrix-{ftype}.gguf"
        start = time.perf_counter()
        subprocess.run([str(bin_dir / "llama-quantize"), "--imatrix", str(matrix), "--token-embedding-type", "f16",
                        "--output-tensor-type", "f16", str(dense), str(out), ftype.upper(), str(threads)],
                       check=True, capture_output=True)
        entries.append(Entry(f"llama-quantize {ftype.upper()} + imatrix", "llama-quantize", out,
                             {"ftype": ftype, "imatrix": True, "embedding": "F16 (kept, as PruneLab's exports)",
                              "solve_seconds": round(matrix_seconds + time.perf_counter() - start, 2)}))
    return entries


def main() -> None:
    """Export, quantize, measure every GGUF with llama.cpp and print one JSON object per GGUF."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--runs", nargs="*", default=[], help="run folders with a saved model")
    parser.add_argument("--quantizers", default="q4_0,q4_1,q4_k_m", help="llama-quantize types ('' for none)")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved speed rounds (medians reported)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--work", default="/tmp/prunelab-llamacpp", help="where the GGUFs are written")
    parser.add_argument("--llama-bin", default=None, help="folder of llama.cpp's llama-imatrix and llama-quantize: "
                        "adds the quantizer's types with an importance matrix from the calibration text")
    parser.add_argument("--imatrix-types", default="q4_0,q4_1,q4_k_m", help="types quantized with the matrix")
    parser.add_argument("--nsamples", type=int, default=32, help="calibration windows for the importance matrix")
    parser.add_argument("--calib-seqlen", type=int, default=512)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch

    from toolkit.data.text import eval_windows, load_tokens
    from toolkit.evaluation import llamacpp
    from toolkit.evaluation.perplexity import perplexity
    from toolkit.models.load import bos_id
    from toolkit.run.provenance import git_head

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    quantizers = [q for q in args.quantizers.split(",") if q]
    entries, loaded = _dense_entries(args.model, work, quantizers, args.threads)
    if args.llama_bin:
        calib = calibration_text(loaded, work / "calibration.txt", args.nsamples, args.calib_seqlen, 0)
        types = [q for q in args.imatrix_types.split(",") if q]
        entries += imatrix_entries(entries[0].path, calib, work, types, args)
    entries += [_run_entry(Path(run), work, args.windows, args.seqlen) for run in args.runs]
    windows = eval_windows(load_tokens("wiki", "test", loaded.codec), args.seqlen, args.windows, bos_id(loaded))
    entries[0].facts["ppl_prunelab"] = perplexity(loaded.model, windows, torch.device("cpu"))
    ids = windows.tolist()
    for entry in entries:
        start = time.perf_counter()
        entry.facts["ppl_llamacpp"] = llamacpp.perplexity(entry.path, ids, args.threads)
        entry.facts["ppl_seconds"] = round(time.perf_counter() - start, 2)
    prompt = ids[0][: args.prompt_tokens]
    for _ in range(args.repeats):  # interleaved: each round measures every model once
        for entry in entries:
            entry.speeds.append(llamacpp.speed(entry.path, prompt, args.new_tokens, repeats=1, threads=args.threads))
    base = entries[0]
    base_prefill = statistics.median(s.prefill_tps for s in base.speeds)
    base_decode = statistics.median(s.decode_tps for s in base.speeds)
    versions = {"llama_cpp_python": llamacpp.llama_cpp().__version__, "git": git_head(), "torch": torch.__version__}
    for entry in entries:
        prefill = statistics.median(s.prefill_tps for s in entry.speeds)
        decode = statistics.median(s.decode_tps for s in entry.speeds)
        ours, theirs = entry.facts.get("ppl_prunelab"), entry.facts["ppl_llamacpp"]
        emit({"benchmark": "llamacpp", "model": args.model, "label": entry.label, "kind": entry.kind,
              **entry.facts, "gguf_mib": round(entry.path.stat().st_size / 2**20, 2),
              "ppl_gap": None if ours is None else theirs / ours - 1,
              "prefill_tps": round(prefill, 1), "decode_tps": round(decode, 1),
              "prefill_speedup": round(prefill / base_prefill, 3), "decode_speedup": round(decode / base_decode, 3),
              "protocol": {"evaluation": {"dataset": "wiki", "split": "test", "seqlen": args.seqlen,
                                          "windows": args.windows, "all_windows": False},
                           "windows": args.windows, "seqlen": args.seqlen, "threads": args.threads,
                           "repeats": args.repeats, "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
                           "interleaved": True, "batch": 1},
              "versions": versions}, args.json)


if __name__ == "__main__":
    main()
