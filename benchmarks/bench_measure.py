"""``measure`` of a saved model vs its dense source, recorded with the machine's state (prints JSON).

The record is :func:`toolkit.evaluation.footprint.measure`'s (what ``python -m toolkit measure DIR --json``
writes), plus the run's method and compression from its config.json, the load average before and
after, the process CPU seconds and the host's steal share (:mod:`benchmarks.host_clock`), and versions.

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_measure runs/<run> --threads 1 \\
        --json benchmarks/results/measure_cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.cli.measure import parse_batches, table
from toolkit.evaluation.footprint import Settings, check_baseline, check_folder, measure, run_source
from toolkit.run.provenance import versions
from toolkit.runtime.devices import resolve_device


def main() -> None:
    """Measure one folder against its run's source (or ``--baseline``) and print (and append) the record."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a run folder saved with --save-model, or a checkpoint folder")
    parser.add_argument("--baseline", default=None, help="default: the model the run's config.json names")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, help="append the object to this JSON-lines file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = check_folder(args.folder)
    baseline = args.baseline or run_source(folder)
    settings = Settings(resolve_device(args.device), parse_batches(args.batches), args.prompt_tokens,
                        args.new_tokens, args.repeats)
    load_before, start = os.getloadavg()[0], Clock.now()
    record = measure(folder, check_baseline(baseline, from_run=True) if baseline else None, settings)
    end = Clock.now()
    run_config = folder.parent / "config.json"
    config = json.loads(run_config.read_text()) if run_source(folder) else {}
    print(table(record))
    emit({"benchmark": "measure", "run": folder.parent.name if config else None, "method": config.get("method"),
          "sparsity": config.get("sparsity"), "unit": config.get("unit"), **record,
          "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
          "wall_seconds": round(end.wall - start.wall, 1), **end.since(start), "versions": versions(),
          "folder": str(Path(folder))}, args.json)


if __name__ == "__main__":
    main()
