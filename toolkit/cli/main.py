"""The command line: ``python -m toolkit prune | eval | methods | models | runs | recover | measure | export``.

A user's mistake prints one line starting with ``error:`` and exits with 2 (no traceback), before
any model loads; a failure of the machine or a library (disk full, permission denied, out of
memory, an unforeseen exception) prints one ``error:`` line and exits with 1, and the run store
marks the run failed. ``--debug`` (or ``PRUNELAB_DEBUG=1``) shows the traceback instead. A
cancelled run (Ctrl-C) exits with 130 and is marked cancelled in the run store.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.cli.protocol import add_protocol_args
from toolkit.engine.options import CALIBRATE, ERROR_MODES, FORWARD_DTYPES, FUSED, PROPAGATE, SEQUENTIAL, STORAGE_DTYPES
from toolkit.errors import MachineFailure, RunCancelled, ToolkitError


def parse_set(items: Sequence[str]) -> dict[str, str]:
    """``--set key=value`` items as a dict (whitespace around key and value dropped); one line on a bad item."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolkitError(f"--set takes key=value, got {item!r}")
        options[key.strip()] = value.strip()
    return options


def _task_args(parser: argparse.ArgumentParser, limit_flag: str, what: str) -> None:
    """--tasks, the per-task limit and --task-data (zero-shot accuracy, toolkit/evaluation/zeroshot.py)."""
    parser.add_argument("--tasks", default=None, help=f"{what}, e.g. boolq,rte,hellaswag,winogrande,arc_easy,"
                                                      "arc_challenge,openbookqa (lm-eval, 0 shots)")
    parser.add_argument(limit_flag, type=int, default=None, help="score only the first N examples of each task")
    parser.add_argument("--task-data", default="auto", choices=("auto", "local", "hub"),
                        help="auto: lm-eval's stock tasks when the hub is reachable, else the local validation copies")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (sub-commands prune, eval, methods, runs)."""
    parser = argparse.ArgumentParser(prog="python -m toolkit", description="PruneLab: post-training pruning of LLMs")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure instead of one error line (also PRUNELAB_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prune", help="prune a model and evaluate it")
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m | gemma-3-270m | tiny-llama | DIR | "
                   "FILE.gguf | HF id (see `python -m toolkit models`)")
    p.add_argument("--method", default="wanda", help="see `python -m toolkit methods`")
    p.add_argument("--sparsity", default=None,
                   help="50%%, 0.5, 2:4, 4:8, structured:30%%, 'structured:4 layers' (--method depth), or none "
                   "(default: 50%% unless --quant is given)")
    p.add_argument("--quant", default=None, help="weight quantization: int8, int4, int3, int2, optionally with a "
                   "group size (int4:g128, the default; g0 = one group per row) and :sym (quantizing methods only)")
    p.add_argument("--permute", action="store_true", help="n:m: permute each linear's inputs so the important ones "
                   "spread over the m-groups (RIA's channel permutation; docs/methods/ria.md)")
    p.add_argument("--unit", default=None, help="structural unit a block-scope method removes: heads | channels | "
                   "heads+channels | layers (depth) (needs --sparsity structured:P%%)")
    p.add_argument("--calib", default="wiki", help="wiki | wikitext2 | c4 | ptb | FILE.txt")
    add_protocol_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval", default=None, help="evaluation text, or 'none' (default: wiki; none with --stream)")
    p.add_argument("--encoding", default="utf-8", help="encoding of --calib / --eval text files (e.g. latin-1)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for tensor ops (default: torch's, or $PRUNELAB_THREADS)")
    p.add_argument("--eval-dense", action="store_true", help="also report the dense perplexity (cached)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a method option")
    p.add_argument("--propagate", default=None, choices=PROPAGATE, help="default: the method's")
    p.add_argument("--sequential", default=None, choices=SEQUENTIAL, help="default: the method's")
    p.add_argument("--batch-size", type=int, default=8, help="calibration windows per forward pass (unfused)")
    p.add_argument("--fused", default="auto", choices=FUSED,
                   help="sequential=group in one pass per layer over all windows at once (auto: when it fits "
                        "in memory); same numbers as off, one forward per layer instead of 3–4")
    p.add_argument("--error-windows", type=int, default=4,
                   help="calibration windows behind each layer's output error (and Wanda's reported rel_error)")
    p.add_argument("--error", default="sample", choices=ERROR_MODES,
                   help="the layer output error: measured on --error-windows windows (sample), or not at all (none: "
                        "no dense pass runs for it; the weights are the same)")
    p.add_argument("--calibrate", default="auto", choices=CALIBRATE,
                   help="auto: a data-free method (magnitude, rtn) reads the weights alone and runs no calibration "
                        "pass (its per-layer figure is the weight error ‖ΔW‖/‖W‖); always: run the pass anyway, for "
                        "the layer output errors")
    p.add_argument("--out", default=None, help="run store folder (default: runs); holds the run record, "
                   "not the model unless --save-model")
    p.add_argument("--save-model", action="store_true",
                   help="also write the compressed model as a loadable checkpoint in the run folder (<run>/model)")
    p.add_argument("--stream", action="store_true",
                   help="read a local checkpoint folder one decoder layer at a time and write the pruned one as shards "
                        "(host memory: one layer, the activations and the embeddings; see docs/scale.md)")
    p.add_argument("--json", default=None, help="write the result object to this file")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    _task_args(p, "--task-limit", "zero-shot tasks scored on the dense (cached) and the pruned model")
    p.add_argument("--generate", action="store_true",
                   help="greedy continuations of the fixed prompts from the dense and the pruned model")
    p.add_argument("--generate-tokens", type=int, default=None,
                   help="new tokens per prompt of --generate (default: 32)")
    p.set_defaults(task_data=None)  # prune refuses a flag whose stage does not run (toolkit/cli/prune_flags.py)
    p.add_argument("--devices", default="auto",
                   help="prune layers concurrently on these devices, e.g. cuda:0,cuda:1 (needs --propagate dense; "
                        "auto: every GPU when there are several and the inputs are dense)")
    _add_scale_options(p)
    _add_other_commands(sub)
    from toolkit.cli.recover import add_recover_command

    add_recover_command(sub)
    from toolkit.cli.measure import add_measure_command

    add_measure_command(sub)
    from toolkit.cli.export import add_export_command

    add_export_command(sub)
    return parser


def _add_other_commands(sub: Any) -> None:
    """The eval, generate, methods and runs sub-commands."""
    e = sub.add_parser("eval", help="perplexity and zero-shot accuracy of a model (only what is asked)")
    e.add_argument("--model", default="smollm2-135m")
    e.add_argument("--data", default=None, help="perplexity text (wiki | wikitext2 | c4 | ptb | FILE.txt), or none "
                   "(default: wiki without --tasks; with --tasks, no perplexity unless given)")
    e.add_argument("--seqlen", type=int, default=None, help="tokens per perplexity window (default: 512)")
    e.add_argument("--windows", default=None, help="score only the first N windows (default: all)")
    e.add_argument("--encoding", default="utf-8", help="encoding of a --data text file (e.g. latin-1)")
    e.add_argument("--device", default="auto")
    e.add_argument("--dtype", default="auto", choices=STORAGE_DTYPES,
                   help="the dtype the model is loaded and evaluated in (auto: the checkpoint's own)")
    _task_args(e, "--limit", "zero-shot tasks")
    e.set_defaults(encoding=None, task_data=None)  # eval refuses a flag that would not apply, so it tells given ones
    e.add_argument("--json", default=None, help="write perplexity, protocol and zero_shot to this file")
    # greedy generation (toolkit/evaluation/generate.py)
    g = sub.add_parser("generate", help="greedy (deterministic) text from a model, with tokens/s")
    g.add_argument("--model", default="smollm2-135m")
    g.add_argument("--prompt", action="append", default=None, help="repeatable; default: the fixed comparison prompts")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--device", default="auto")
    g.add_argument("--json", default=None, help="write the texts and the protocol to this file")
    m = sub.add_parser("methods", help="methods, their options and the sparsity patterns they support")
    m.add_argument("--json", action="store_true")
    n = sub.add_parser("models", help="the embedded models (installed by make setup), their licences, the tiny ones")
    n.add_argument("--json", action="store_true")
    r = sub.add_parser("runs", help="list the run store")
    r.add_argument("--out", default="runs")


def _add_scale_options(p: argparse.ArgumentParser) -> None:
    """The prune options for speed and scale (forward precision, torch.distributed) and the layer plan."""
    p.add_argument("--forward-dtype", default="auto", choices=FORWARD_DTYPES,
                   help="the layers' forward passes: auto = bf16 on a GPU, fp32 on a CPU; bf16 asks for it on a CPU "
                        "(fp32 with a warning where the device has no bf16); statistics and solves stay float32")
    p.add_argument("--dtype", default="auto", choices=STORAGE_DTYPES,
                   help="the model's dtype on the host and in the saved checkpoint: auto = the checkpoint's own "
                        "(bfloat16 for most, a .gguf and gemma-3-270m; float32 for smollm2-135m and the tiny models); "
                        "layers are upcast one at a time where the passes run in float32")
    p.add_argument("--distributed", action="store_true",
                   help="solve the layers on the ranks of `torchrun --nproc-per-node N -m toolkit prune …` "
                        "(needs --propagate dense)")
    p.add_argument("--dist-timeout", type=float, default=1800.0,
                   help="seconds a rank waits for another before the distributed run fails")
    p.add_argument("--allocation", default="uniform",
                   help="per-layer sparsity: uniform | owl (outlier-weighted, OWL) | owl:M,λ | FILE.json of per-layer "
                        "ratios (docs/allocation.md)")
    p.add_argument("--refine", default=None,
                   help="refine each mask after the method: dsnot | dsnot:N[,ε[,all]] (DSnoT; docs/allocation.md)")


LAZY_COMMANDS = {"models": ("toolkit.cli.models", "run_models"), "recover": ("toolkit.cli.recover", "run_recover"),
                 "measure": ("toolkit.cli.measure", "run_measure"), "export": ("toolkit.cli.export", "run_export")}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    args = build_parser().parse_args(argv)
    # `kill` (SIGTERM) cancels like Ctrl-C, so the run record is marked cancelled, not left "running"
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    debug = args.debug or os.environ.get("PRUNELAB_DEBUG", "") not in ("", "0")
    try:
        if args.command == "prune":
            return _prune(args)
        if args.command == "eval":
            from toolkit.cli.evaluate import eval_command

            return eval_command(args)
        if args.command == "methods":
            return _methods(args)
        if args.command in LAZY_COMMANDS:  # imported only when asked: `runs` and the parser stay torch-free
            module, function = LAZY_COMMANDS[args.command]
            return getattr(importlib.import_module(module), function)(args)
        if args.command == "generate":
            return _generate(args)
        return _runs(args)
    except ToolkitError as exc:
        from toolkit.cli.distributed import report_error  # under torchrun, rank 0 alone says an input error

        report_error(exc, getattr(args, "distributed", False))
        return 1 if isinstance(exc, MachineFailure) else 2  # the machine failed a recorded run, not the input
    except (RunCancelled, KeyboardInterrupt) as exc:
        print(f"cancelled: {cancel_message(exc)}", file=sys.stderr)
        return 130
    except Exception as exc:  # the edge: whatever the machine or a library raised becomes one line
        if debug:
            raise
        print(f"error: {environment_message(exc)}", file=sys.stderr)
        return 1


def cancel_message(exc: BaseException) -> str:
    """What a cancel left: the run's own message once a run was recorded (where, what was kept), else nothing."""
    detail = str(exc) if isinstance(exc, RunCancelled) and str(exc) != "cancelled" else ""
    return f"{detail}; the run is marked cancelled" if detail else \
        "stopped before a run was recorded; nothing was written and no model was changed"


def environment_message(exc: BaseException) -> str:
    """One line saying what failed and what to do, for an exception that is not the user's input."""
    import errno

    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return "out of memory: lower --nsamples, --seqlen, --eval-seqlen or --batch-size, or use a smaller model"
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            return f"the disk is full{where}: free space or give another --out; the run is marked failed"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"permission denied{where}: give a writable --out or fix the file's permissions"
        return f"{exc.strerror or exc}{where}: check the path and the disk"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:300]} (an unexpected failure; rerun with --debug for the traceback)"


def _prune(args: argparse.Namespace) -> int:
    from toolkit.api import RunConfig
    from toolkit.cli.protocol import protocol_line, resolve_sizes
    from toolkit.cli.prune_flags import check_prune_flags
    from toolkit.evaluation.tasks import parse_task_names
    from toolkit.methods import get_method
    from toolkit.run.inputs import check_input_files
    from toolkit.run.preflight import check_writable_file
    from toolkit.runtime.threads import pick_threads
    from toolkit.spec.compression import parse_compression

    if args.json:
        check_writable_file(args.json)  # now, not after the run
    eval_text = args.eval or ("none" if args.stream else "wiki")
    eval_data = None if eval_text.lower() == "none" else eval_text
    check_prune_flags(args, eval_data)
    sparsity = args.sparsity if args.sparsity is not None or args.quant is not None else "50%"
    compression = parse_compression(sparsity, args.quant, args.unit, args.permute)  # parsed once, here at the edge
    sizes = resolve_sizes(args)
    config = RunConfig(
        model=args.model, method=args.method, sparsity=compression.sparsity, quant=compression.quant,
        unit=compression.unit, permute=compression.permute, options=parse_set(args.set),
        calib=args.calib, nsamples=sizes.nsamples, seqlen=sizes.seqlen, seed=args.seed, eval_data=eval_data,
        eval_seqlen=sizes.eval_seqlen, eval_windows=sizes.eval_windows, eval_dense=args.eval_dense,
        device=args.device, propagate=args.propagate, sequential=args.sequential, batch_size=args.batch_size,
        fused=args.fused, error_windows=args.error_windows, error=args.error, calibrate=args.calibrate,
        devices=args.devices,
        forward_dtype=args.forward_dtype, dtype=args.dtype, stream=args.stream,
        distributed=args.distributed, dist_timeout=args.dist_timeout,
        out_dir=args.out or "runs", save_model=args.save_model, encoding=args.encoding,
        threads=pick_threads(args.threads),
        tasks=tuple(parse_task_names(args.tasks)) if args.tasks is not None else (), task_limit=args.task_limit,
        task_data=args.task_data or "auto", generate=args.generate,
        generate_tokens=args.generate_tokens if args.generate_tokens is not None else RunConfig.generate_tokens,
        allocation=args.allocation, refine=args.refine,
    )
    check_input_files(config)  # before the protocol line: an allocation file against the model's layers
    # a quantization whose states no checkpoint format holds (AWQ) is never saved: say why, not "add --save-model"
    method = get_method(args.method)
    unsavable = compression.quant is not None and not method.saves(method.make_config(config.options))
    fold = "; --set scale=shared shares and folds one per group, and saves" if method.savable is not None else ""
    not_saved = (f"{args.method} states need their input scale folded into the preceding op, which no checkpoint "
                 f"format holds (the run record has the codes and scales){fold}") if unsavable else ""
    start = protocol_line(sizes, eval_data)
    if config.distributed:
        from toolkit.cli.distributed import prune_distributed

        return prune_distributed(config, lambda: _prune_here(config, args.json, start, not_saved))
    return _prune_here(config, args.json, start, not_saved)


def _prune_here(config: Any, json_path: str | None, start: str, not_saved: str = "") -> int:
    """Print ``start`` (the protocol line), run with progress bars, then the tables and the summary."""
    from toolkit.api import prune_model
    from toolkit.cli.view import ProgressView, calibration_note, layer_table, summary, write_json

    print(start, flush=True)  # before any work: which protocol, its sizes, the other one
    note = calibration_note(config)
    if note:
        print(note, flush=True)
    view = ProgressView()
    try:
        result = prune_model(config, on_event=view.on_event)
    finally:
        view.close()
    print(layer_table(result, view.depth, view.units))
    summary(result, not_saved)
    if json_path:
        write_json(json_path, result)
    return _report_extras(result)


def _report_extras(result: dict[str, Any]) -> int:
    """Print the dense-vs-pruned accuracy table and the texts; 1 when their pruned evaluation failed."""
    from toolkit.cli.zeroshot import run_generations_report, run_zero_shot_table

    errors = []
    for key, render in (("zero_shot", run_zero_shot_table), ("generations", run_generations_report)):
        entry = result.get(key)
        if entry:
            print(render(entry))
            if entry.get("error"):
                errors.append(f"{key.replace('_', '-')} of the pruned model failed: {entry['error']}")
    for error in errors:
        print(f"error: {error} (the pruning finished; run record: {result['run_dir']})", file=sys.stderr)
    return 1 if errors else 0


def _generate(args: argparse.Namespace) -> int:
    from toolkit.cli.view import write_json
    from toolkit.cli.zeroshot import generation_json, generation_report
    from toolkit.evaluation.generate import DEFAULT_PROMPTS, generate, protocol
    from toolkit.models.load import load_model
    from toolkit.runtime.devices import resolve_device

    if args.max_new_tokens < 1:
        raise ToolkitError(f"--max-new-tokens must be ≥ 1, got {args.max_new_tokens}")
    prompts = args.prompt or list(DEFAULT_PROMPTS)
    if not all(p.strip() for p in prompts):
        raise ToolkitError("a --prompt is empty: give some text")
    device = resolve_device(args.device)
    loaded = load_model(args.model)
    generations = generate(loaded.model, loaded.codec, prompts, args.max_new_tokens, device)
    print(generation_report(generations))
    if args.json:
        write_json(args.json, generation_json(generations, protocol(loaded.codec, args.max_new_tokens, device,
                                                                     loaded.model), loaded))
    return 0


def _methods(args: argparse.Namespace) -> int:
    from toolkit.api import list_methods

    methods = list_methods()
    if args.json:
        print(json.dumps(methods, indent=2, default=str))
        return 0
    for method in methods:
        print(f"{method['name']:<10} {method['summary']}")
        units = f"; units: {', '.join(method['units'])}" if method["units"] else ""
        print(f"{'':<10} scope {method['scope']}; produces {', '.join(method['produces'])}; "
              f"patterns: {', '.join(method['patterns']) or 'none'}{units}"
              f"{'; n:m with --permute' if method['permute'] else ''}; engine defaults: "
              f"sequential={method['defaults']['sequential']}, propagate={method['defaults']['propagate']}")
        for opt in method["options"]:
            choices = f" (one of {opt['choices']})" if opt["choices"] else ""
            print(f"{'':<10} --set {opt['name']}=<{opt['type']}> default {opt['default']!r}{choices}: {opt['help']}")
    return 0


def _runs(args: argparse.Namespace) -> int:
    from toolkit.cli.view import run_lines  # the store directly, not through toolkit.api
    from toolkit.store.runs import list_runs

    root = Path(args.out)
    if not root.is_dir():
        raise ToolkitError(f"run store {args.out!r} does not exist or is not a folder; pass --out with the folder "
                           "given to `prune --out` (default: runs)")
    records = list_runs(root)
    if not records:
        print(f"no runs in {args.out!r}")
    for line in run_lines(records):
        print(line)
    return 0
