"""``python -m toolkit export RUN --format gguf [--type …] [--out FILE] [--force]``: a run's model for llama.cpp.

Checks everything before the model loads (:func:`toolkit.run.export.check_export`), says first what
the format cannot hold (a sparse run is stored dense), writes the GGUF and prints what it wrote:
tensors per type, the linears written code for code, and for a re-quantized grid the added error.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from toolkit.errors import ToolkitError


def add_export_command(sub: Any) -> None:
    """The ``export`` sub-command and its options."""
    from toolkit.run.export import FORMATS, TYPES

    x = sub.add_parser("export", help="write a run's saved model for a serving engine (GGUF: llama.cpp, Ollama)")
    x.add_argument("run", metavar="RUN", help="a run folder with a saved model (prune --save-model)")
    x.add_argument("--format", default="gguf", choices=FORMATS)
    x.add_argument("--type", default="auto", choices=TYPES,
                   help="auto: a quantized run's linears in the GGUF block type that holds its grid code for code "
                        "(int4 g32·k asymmetric → Q4_1, symmetric → Q4_0, int8 sym → Q8_0; other grids "
                        "re-quantized, with the error printed), the rest F16 (BF16 for a bfloat16 model); f32 | f16 "
                        "| bf16: every weight as floats; q4_0 | q4_1 | q8_0: a quantized run's linears in that type")
    x.add_argument("--out", default=None, help="the file to write (default: RUN/<run id>.gguf)")
    x.add_argument("--force", action="store_true", help="replace --out if it exists")
    x.add_argument("--json", default=None, help="also write what was written as JSON to this file")


def run_export(args: argparse.Namespace) -> int:
    """Check, say what the format cannot hold, write, print the summary."""
    from toolkit.run.export import ExportConfig, check_export, export_run

    config = ExportConfig(run_dir=args.run, format=args.format, type=args.type, out=args.out, force=args.force)
    plan = check_export(config)
    for note in plan.notes:
        print(f"note: {note}")
    print(f"exporting run {plan.record.run_id} ({plan.record.label}) with the metadata and tokenizer of "
          f"{plan.source.name} → {plan.out}")
    start = time.perf_counter()
    report = export_run(config, plan)
    seconds = time.perf_counter() - start
    types = ", ".join(f"{count} {name}" for name, count in sorted(report.types.items()))
    print(f"wrote {plan.out} ({report.bytes / 2**20:.2f} MiB, {seconds:.1f} s): tensors {types}")
    if plan.quantized and report.exact:
        print(f"{report.exact} quantized linears written code for code (the GGUF weights equal PruneLab's up to the "
              "fp16 rounding of the scales)")
    if report.requantized:
        worst = max(report.requantized, key=report.requantized.__getitem__)
        print(f"{len(report.requantized)} linears re-quantized (their grid is no GGUF block type): added error "
              f"‖Ŵ_gguf − Ŵ‖/‖Ŵ‖ up to {report.requantized[worst]:.4f} ({worst}), mean "
              f"{sum(report.requantized.values()) / len(report.requantized):.4f}")
    print(f"run it: llama-cli -m {plan.out}  (or Ollama: a Modelfile with `FROM {plan.out}`)")
    if args.json:
        record = {"run": plan.record.run_id, "out": str(plan.out), "bytes": report.bytes, "types": report.types,
                  "exact": report.exact, "requantized": report.requantized, "notes": plan.notes,
                  "source": str(plan.source), "seconds": round(seconds, 2)}
        try:
            with open(args.json, "w") as handle:
                json.dump(record, handle, indent=2)
        except OSError as exc:
            raise ToolkitError(f"could not write --json {args.json} ({exc.strerror or exc}); the GGUF is written") \
                from None
    return 0
