"""``prune --protocol quick|cpu|paper``: the calibration and perplexity sizes, and the line that names them.

The presets are :data:`toolkit.run.protocols.PROTOCOLS` (shared with the app). ``--nsamples``,
``--seqlen``, ``--eval-seqlen`` and ``--eval-windows`` given on the command line override the
preset's value; :func:`protocol_line` says which protocol runs, its sizes and how to get the other
one, before any work starts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from toolkit.errors import ToolkitError
from toolkit.run.protocols import DEFAULT_PROTOCOL, DEMO_MINUTES, PROTOCOLS, QUICK, Protocol, get_protocol

SIZE_FLAGS = ("--nsamples", "--seqlen", "--eval-seqlen", "--eval-windows")


def parse_windows(text: str | None, flag: str = "--eval-windows") -> int | None:
    """A window count: a number, or None for ``all`` / not given; one line naming ``flag`` otherwise."""
    if text is None or text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise ToolkitError(f"{flag} takes a number or 'all', got {text!r}") from None


def add_protocol_args(parser: argparse.ArgumentParser) -> None:
    """--protocol and the four sizes it sets (each None unless given, so a given one overrides the preset)."""
    sizes = "; ".join(f"{p.name}: {p.sizes}" for p in PROTOCOLS.values())
    parser.add_argument("--protocol", default=DEFAULT_PROTOCOL, choices=tuple(PROTOCOLS),
                        help=f"calibration and perplexity sizes ({sizes}); quick previews in minutes, cpu is the "
                             "protocol of docs/results.md (default: %(default)s); the four size options override it")
    parser.add_argument("--nsamples", type=int, default=None, help="calibration windows (default: the protocol's)")
    parser.add_argument("--seqlen", type=int, default=None, help="tokens per calibration window (default: the "
                        "protocol's)")
    parser.add_argument("--eval-seqlen", type=int, default=None, help="tokens per evaluation window (default: the "
                        "protocol's)")
    parser.add_argument("--eval-windows", default=None, help="score only the first N windows, or all (default: the "
                        "protocol's)")


@dataclass(frozen=True)
class Sizes:
    """The sizes a run uses: the preset's, with the ones given on the command line instead."""

    preset: Protocol
    given: tuple[str, ...]  # the size flags the user typed
    nsamples: int
    seqlen: int
    eval_seqlen: int
    eval_windows: int | None  # None: every window


def resolve_sizes(args: argparse.Namespace) -> Sizes:
    """The sizes of ``prune``'s arguments: ``--protocol``'s preset, overridden by each size flag given."""
    preset = get_protocol(args.protocol)
    given = tuple(flag for flag in SIZE_FLAGS if getattr(args, flag[2:].replace("-", "_")) is not None)
    windows = parse_windows(args.eval_windows) if args.eval_windows is not None else preset.eval_windows
    return Sizes(preset, given,
                 nsamples=args.nsamples if args.nsamples is not None else preset.nsamples,
                 seqlen=args.seqlen if args.seqlen is not None else preset.seqlen,
                 eval_seqlen=args.eval_seqlen if args.eval_seqlen is not None else preset.eval_seqlen,
                 eval_windows=windows)


def protocol_line(sizes: Sizes, eval_data: str | None) -> str:
    """One line, printed before work starts: the protocol, its sizes, and how to get the other one.

    E.g. ``protocol quick: 16 × 128 calibration tokens, perplexity on the first 16 windows of 128 tokens
    (a preview; --protocol cpu for the numbers of docs/results.md: 32 × 512, every window; …)``.
    """
    custom = len(sizes.given) == len(SIZE_FLAGS)
    name = "custom" if custom else sizes.preset.name
    given = f" ({', '.join(sizes.given)} given)" if sizes.given and not custom else ""
    if eval_data is None:
        scored = "no perplexity"
    else:
        count = sizes.eval_windows
        windows = "every window" if count is None else f"the first {count} windows" if count > 1 else "the first window"
        scored = f"perplexity on {windows} of {sizes.eval_seqlen} tokens"
    line = f"protocol {name}{given}: {sizes.nsamples} × {sizes.seqlen} calibration tokens, {scored}"
    if custom:
        return line
    demo = (f"make cli-demo's job took {DEMO_MINUTES['quick']} min quick, about {DEMO_MINUTES['cpu']} min cpu on a "
            "busy 2-core CPU")
    if sizes.preset is QUICK:
        cpu = PROTOCOLS["cpu"]
        return (f"{line} (a preview; --protocol cpu for the numbers of docs/results.md: {cpu.nsamples} × "
                f"{cpu.seqlen}, every window; {demo})")
    where = ", as in docs/results.md" if sizes.preset.name == "cpu" else ""
    return (f"{line}{where} (--protocol quick for a preview: {QUICK.nsamples} × {QUICK.seqlen}, "
            f"{QUICK.eval_windows} windows of {QUICK.eval_seqlen}; {demo})")
