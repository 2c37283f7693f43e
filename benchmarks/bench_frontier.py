"""One point of the compression frontier: a finished run's perplexity, size and decode speed (prints JSON).

The outputs are made with the CLI (``benchmarks/frontier.sh`` lists every command); this script
reads the last run of a chain, follows its links back to the dense source (a recovery's
``parent_dir``, a prune whose ``--model`` is an earlier run's ``model/``), and measures the saved
model against that dense source in one process (:func:`toolkit.evaluation.footprint.measure`: bytes
on disk, load memory, prefill and decode tokens/s per batch, the two models' passes interleaved,
so the ratio holds on a busy machine). A run that could not be saved (AWQ) keeps its estimated
bytes and no speed, with the reason. ``--dense NAME`` records the dense source itself: its
perplexity on the same protocol and its speed.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_frontier RUN --entry "numerical 20% + KD" --family width \\
        --json benchmarks/results/cpu_frontier.jsonl
    OMP_NUM_THREADS=1 python -m benchmarks.bench_frontier --dense smollm2-135m \\
        --json benchmarks/results/cpu_frontier.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch

from benchmarks.records import emit
from toolkit.cli.measure import parse_batches
from toolkit.evaluation.footprint import Settings, check_folder, measure
from toolkit.run.provenance import versions
from toolkit.runtime.devices import resolve_device

FAMILIES = ("dense", "width", "depth", "quant", "width+quant", "depth+quant")
NOT_SAVABLE = {"awq": "AWQ's Q(W·diag s)/s needs 1/s folded into the preceding op; with its own s per linear "
                      "(scale=own, the run measured here) it cannot be saved; scale=shared saves"}


def _read(run: Path, name: str) -> dict[str, Any]:
    data = json.loads((run / name).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SystemExit(f"error: {run / name} is not a JSON object")
    return data


def chain_of(run: Path) -> list[Path]:
    """The run folders from the first compression to ``run`` (recoveries and chained prunes followed back)."""
    chain = [run]
    while True:
        config = _read(chain[0], "config.json")
        parent = config.get("parent_dir") or (str(Path(config["model"]).parent)
                                              if str(config.get("model", "")).endswith("/model") else None)
        if not parent:
            return chain
        chain.insert(0, Path(parent))


def step_of(run: Path) -> dict[str, Any]:
    """One step of a chain as the record lists it: run id, method, compression, commit, seconds."""
    config, result = _read(run, "config.json"), _read(run, "result.json")
    compression = (config.get("compression") or {}).get("label") or config.get("sparsity") or config.get("quant")
    if config.get("method") == "recover":
        compression = f"{config.get('loss', 'lm')} {config.get('train', 'lora')} {config.get('steps')} steps"
    seconds = result.get("prune_seconds") or sum((result.get("seconds") or {}).values()) or None
    return {"run": run.name, "method": config.get("method"), "compression": compression,
            "git": (result.get("versions") or {}).get("git"), "seconds": seconds}


def _speeds(model: dict[str, Any], key: str) -> dict[str, float]:
    return {str(s["batch"]): s[key] for s in model["speed"]}


def measured(folder: Path, baseline: str | None, settings: Settings) -> dict[str, Any]:
    """Bytes, params and the speed block of the record, from one :func:`measure` of ``folder`` (vs ``baseline``)."""
    record = measure(folder, baseline, settings)
    model = record["models"][0]
    dense = record["models"][1] if baseline is not None else model
    speed = {"device": record["device"], "threads": record["threads"], "batches": record["batches"],
             "prompt_tokens": record["prompt_tokens"], "new_tokens": record["new_tokens"],
             "repeats": record["repeats"],
             "decode_tokens_per_s": _speeds(model, "decode_tokens_per_s"),
             "dense_decode_tokens_per_s": _speeds(dense, "decode_tokens_per_s"),
             "prefill_tokens_per_s": _speeds(model, "prefill_tokens_per_s"),
             "dense_prefill_tokens_per_s": _speeds(dense, "prefill_tokens_per_s")}
    return {"params": model["params"], "bytes_on_disk": model["bytes_on_disk"], "speed": speed,
            "load_mb": model["load"]}


def point(run: Path, settings: Settings) -> dict[str, Any]:
    """The record fields of the chain ending at ``run``: steps, perplexity, bytes and speed."""
    chain = chain_of(run)
    root = str(_read(chain[0], "config.json")["model"])
    result = _read(run, "result.json")
    method = _read(run, "config.json").get("method")
    methods = {_read(r, "config.json").get("method") for r in chain}
    reason = next((NOT_SAVABLE[m] for m in methods if m in NOT_SAVABLE), None)
    fields: dict[str, Any] = {
        "chain": [step_of(r) for r in chain], "ppl": (result.get("ppl") or {}).get("wiki"),
        "dense_ppl": (result.get("dense_ppl") or {}).get("wiki"),
        "bytes_estimated": (result.get("accounting") or {}).get("estimated_bytes"),
        "stored_as": (result.get("bought") or {}).get("stored_as"), "protocol": result.get("protocol"),
        "recovery": result.get("options", {}).get("loss") if method == "recover" else None}
    if reason is None and (run / "model").is_dir():
        fields.update(saved=True, not_saved_reason=None, **measured(check_folder(run), root, settings))
    else:
        fields.update(saved=False, not_saved_reason=reason or "the run saved no model", params=None,
                      bytes_on_disk=None, speed=None)
    return fields


def dense_point(name: str, settings: Settings, windows: int | None) -> dict[str, Any]:
    """The dense source's record: its perplexity on the CPU protocol and its own speed (ratio 1)."""
    from toolkit.data.text import eval_windows, load_tokens
    from toolkit.evaluation.perplexity import perplexity
    from toolkit.models.load import bos_id, load_model
    from toolkit.run.protocols import CPU as protocol

    loaded = load_model(name)
    tokens = load_tokens("wiki", "test", loaded.codec)
    windows_t = eval_windows(tokens, protocol.eval_seqlen, windows, bos_id(loaded))
    ppl = perplexity(loaded.model, windows_t, settings.device)
    fields: dict[str, Any] = {"chain": [], "ppl": ppl, "dense_ppl": ppl, "bytes_estimated": None,
                              "stored_as": "dense", "recovery": None, "saved": True, "not_saved_reason": None,
                              "protocol": {"evaluation": {"dataset": "wiki", "split": "test",
                                                          "seqlen": protocol.eval_seqlen,
                                                          "windows": int(windows_t.shape[0])}}}
    del loaded
    fields.update(measured(Path(name), None, settings))  # a model name or folder, measured alone
    return fields


def main() -> None:
    """Measure one chain's last run (or the dense source) and print (and append) the frontier record."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", nargs="?", help="the last run folder of the chain")
    parser.add_argument("--dense", default=None, help="record the dense source NAME instead of a run")
    parser.add_argument("--entry", default=None, help="the output's label in the table")
    parser.add_argument("--family", choices=FAMILIES, default=None)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--windows", type=int, default=None, help="dense only: first N evaluation windows")
    parser.add_argument("--json", default=None, help="append the object to this JSON-lines file")
    args = parser.parse_args()
    if (args.run is None) == (args.dense is None):
        raise SystemExit("error: give a run folder or --dense NAME")
    torch.set_num_threads(args.threads)
    settings = Settings(resolve_device("cpu"), parse_batches(args.batches), 64, 32, args.repeats)
    load_before = os.getloadavg()[0]
    if args.dense:
        fields, entry, family = dense_point(args.dense, settings, args.windows), args.entry or "dense", "dense"
    else:
        if args.entry is None or args.family is None:
            raise SystemExit("error: a run needs --entry LABEL and --family")
        fields, entry, family = point(Path(args.run), settings), args.entry, args.family
    emit({"benchmark": "frontier", "entry": entry, "family": family, **fields,
          "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "versions": versions()},
         args.json)


if __name__ == "__main__":
    main()
