"""``python -m toolkit measure DIR``: bytes on disk, memory to load, prefill and decode tokens/s, vs the dense source.

DIR is a saved model folder: a run folder (``prune --save-model``), its ``model/``, or any local
Hugging Face checkpoint folder with ``*.safetensors``. The dense source is the model the run's
config.json names, or ``--baseline`` (required for a plain folder; ``--baseline none`` measures DIR
alone). Both load in one process, in their own dtype, and run the same harness
(:mod:`toolkit.evaluation.footprint`, :mod:`toolkit.evaluation.speed`); a table is printed, and
``--json FILE`` writes the record. Every input is checked before a model loads.
"""

from __future__ import annotations

import argparse
from typing import Any

from toolkit.errors import ToolkitError

ROWS = (("safetensors on disk", "bytes_on_disk"), ("load: host RSS peak", "host_peak_mb"),
        ("load + 1 forward: RSS peak", "host_ready_mb"), ("load: device memory", "device_mb"))


def add_measure_command(sub: Any) -> None:
    """The ``measure`` sub-command and its options."""
    m = sub.add_parser("measure", help="bytes on disk, load memory, prefill/decode tokens/s of a saved model vs "
                                       "its dense source")
    m.add_argument("folder", metavar="DIR", help="a saved model folder: a run folder, its model/, or a checkpoint")
    m.add_argument("--baseline", default=None, help="the dense source to compare with: DIR | smollm2-135m | "
                   "gemma-3-270m | tiny-llama | none (default: the model the run's config.json names)")
    m.add_argument("--device", default="auto", help="auto | cpu | cuda")
    m.add_argument("--batches", default="1,8", help="batch sizes, comma-separated (default 1,8)")
    m.add_argument("--prompt-tokens", type=int, default=64, help="prompt tokens per row of the prefill")
    m.add_argument("--new-tokens", type=int, default=32, help="new tokens per pass (the first from the prefill)")
    m.add_argument("--repeats", type=int, default=3, help="timed passes per model and batch size (median)")
    m.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's, or $PRUNELAB_THREADS)")
    m.add_argument("--json", default=None, help="write the record to this file")
    m.add_argument("--llamacpp", action="store_true", help="also export the run and its dense source as GGUF and "
                   "time both in llama.cpp at batch 1 (needs the optional extra requirements-llamacpp.txt)")


def parse_batches(text: str) -> tuple[int, ...]:
    """``"1,8"`` → (1, 8); one line for anything else or a size below 1."""
    try:
        batches = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ToolkitError(f"--batches takes whole numbers separated by commas, e.g. 1,8; got {text!r}") from None
    if min(batches) < 1:
        raise ToolkitError(f"--batches sizes must be ≥ 1, got {text!r}")
    return batches


def run_measure(args: argparse.Namespace) -> int:
    """Check every input, measure, print the table (and write ``--json``); returns the exit code."""
    import torch

    from toolkit.cli.measure_llamacpp import check_llamacpp, llamacpp_lines, llamacpp_threads, measure_llamacpp
    from toolkit.cli.view import write_json
    from toolkit.evaluation.footprint import Settings, check_baseline, check_folder, measure, run_source
    from toolkit.evaluation.speed import check_speed_args
    from toolkit.run.preflight import check_writable_file
    from toolkit.runtime.devices import resolve_device
    from toolkit.runtime.threads import pick_threads

    settings = Settings(resolve_device(args.device), parse_batches(args.batches), args.prompt_tokens,
                        args.new_tokens, args.repeats)
    check_speed_args(settings.batches, settings.new_tokens, settings.repeats, settings.prompt_tokens)
    if args.json:
        check_writable_file(args.json)
    folder = check_folder(args.folder)
    baseline = _baseline(args.baseline, run_source(folder), check_baseline)
    served = check_llamacpp(folder) if args.llamacpp else None
    threads = pick_threads(args.threads)
    if threads is not None:
        torch.set_num_threads(threads)
    record = measure(folder, baseline, settings)
    print(table(record))
    if served is not None:
        record["llamacpp"] = measure_llamacpp(served, settings.prompt_tokens, settings.new_tokens, settings.repeats,
                                              llamacpp_threads(args.threads))
        print("\n".join(llamacpp_lines(record["llamacpp"])))
    if args.json:
        write_json(args.json, record)
    return 0


def _baseline(asked: str | None, recorded: str | None, check: Any) -> str | None:
    """The dense source: ``--baseline`` (``none``: no comparison), else the run's recorded source model."""
    if asked is not None:
        return None if asked.strip().lower() == "none" else check(asked, from_run=False)
    if recorded is None:
        raise ToolkitError("this folder is not a PruneLab run's model, so its dense source is unknown: give it with "
                           "--baseline DIR (or --baseline none to measure the folder alone)")
    return check(recorded, from_run=True)


def table(record: dict[str, Any]) -> str:
    """The measurement as a small text table: one column per model (and the ratio model / dense), then a verdict."""
    models = record["models"]
    head = (f"measured on {record['device']}, {record['threads']} thread{'s' if record['threads'] != 1 else ''}, "
            f"{record['prompt_tokens']}-token prompt, {record['new_tokens']} new tokens, median of "
            f"{record['repeats']} repeats after a warm-up, models interleaved")
    names = ["model", "dense source"][:len(models)]
    lines = [head, ""] + [f"{n:<13} {m['name']} ({m['dtype']}, {m['params']:,} parameters)"
                          for n, m in zip(names, models, strict=True)]
    lines += ["", f"{'':<26}" + "".join(f"{n:>15}" for n in names) + (f"{'ratio':>10}" if len(models) > 1 else "")]
    rows = [(label, [_size(m, key) for m in models]) for label, key in ROWS]
    for b, batch in enumerate(record["batches"]):
        for kind in ("prefill", "decode"):
            rows.append((f"{kind} tokens/s, batch {batch}", [m["speed"][b][f"{kind}_tokens_per_s"] for m in models]))
    for label, values in rows:
        if all(v is None for v in values):
            continue
        cells = "".join(f"{_cell(v, label):>15}" for v in values)
        ratio = f"{values[0] / values[1]:>10.2f}" if len(values) > 1 and values[0] and values[1] else ""
        lines.append(f"{label:<26}{cells}{ratio}")
    return "\n".join(lines + _verdict(models))


def _verdict(models: list[dict[str, Any]]) -> list[str]:
    """One plain line when the model has the dense source's shapes and dtype: smaller on disk or not, not faster.

    A packed checkpoint (INT4 codes) has the source's parameters once loaded (dequantized into the
    same dtype) but fewer bytes on disk: it says by how much. A dense one has neither.
    """
    if len(models) < 2 or models[0]["params"] != models[1]["params"] or models[0]["dtype"] != models[1]["dtype"]:
        return []
    ours, dense = models[0].get("bytes_on_disk"), models[1].get("bytes_on_disk")
    if ours and dense and ours < 0.99 * dense:
        return ["", f"smaller on disk, not faster: its weights take {ours / dense:.2f}× the dense source's "
                f"({(dense - ours) / 2**20:.1f} MiB less), but they load dequantized into {models[0]['dtype']}, so it "
                "multiplies as many weights as the dense source and any difference in tokens/s above is the "
                "machine's noise"]
    return ["", "not smaller or faster as saved: the same parameters in the same dtype as the dense source (pruned "
            "weights are stored as zeros and multiplied like any other), so any difference in tokens/s above is the "
            "machine's noise"]


def _size(model: dict[str, Any], key: str) -> float | None:
    return model.get(key) if key == "bytes_on_disk" else model["load"].get(key)


def _cell(value: float | None, label: str) -> str:
    if value is None:
        return "–"
    if label.startswith("safetensors"):
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.0f} MiB" if label.startswith("load") else f"{value:.1f}"
