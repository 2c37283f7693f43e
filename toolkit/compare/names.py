"""What a run is called wherever runs are listed or drawn together: method, target, allocation, refinement.

``FISTAPruner 50% · OWL · DSnoT``: the method's name as its paper spells it, the compression's
label, the layer allocation when it is not uniform and the mask refinement when there is one.
Runs of the same configuration get the calibration seed when that differs, else the date and time
they started (from the run id, ``20261122-191329-…``): never a hash suffix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.spec.allocation import DEFAULT_LAMBDA, DEFAULT_OUTLIER_THRESHOLD
from toolkit.spec.refine import DEFAULT_CYCLES
from toolkit.store.runs import RunRecord

METHOD_NAMES = {  # registry name → the name its paper and docs use
    "magnitude": "magnitude", "wanda": "Wanda", "sparsegpt": "SparseGPT", "fista": "FISTAPruner",
    "thanos": "Thanos", "awp": "AWP", "rtn": "RTN", "gptq": "GPTQ", "awq": "AWQ", "wanda+awq": "Wanda+AWQ",
    "awq+wanda": "AWQ+Wanda", "numerical": "Numerical Pruning", "flap": "FLAP", "wanda-sp": "Wanda-sp",
    "magnitude-sp": "magnitude-sp",
}
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def method_name(method: Any) -> str:
    """``fista`` → ``FISTAPruner``; a name not in :data:`METHODS_NAMES` is shown as stored."""
    return METHOD_NAMES.get(str(method), str(method))


def allocation_name(allocation: Any) -> str:
    """``owl:5,0.08`` (OWL at its defaults) → ``OWL``, ``owl:7,0.1`` → ``OWL M=7 λ=0.1``; "" for uniform."""
    text = str(allocation or "uniform")
    if text == "uniform":
        return ""
    if text.startswith("owl"):
        values = text.partition(":")[2].split(",")
        if values in ([""], [f"{DEFAULT_OUTLIER_THRESHOLD:g}", f"{DEFAULT_LAMBDA:g}"]):
            return "OWL"
        return "OWL " + " ".join(f"{key}={value}" for key, value in zip(("M", "λ"), values, strict=False))
    return f"ratios {text.replace(chr(92), '/').rsplit('/', 1)[-1]}"  # a ratio file: its name


def refine_name(refine: Any) -> str:
    """``dsnot:50`` (the default cycles) → ``DSnoT``, ``dsnot:20`` → ``DSnoT 20``; "" for none."""
    if not refine:
        return ""
    kind, _, rest = str(refine).partition(":")
    label = "DSnoT" if kind == "dsnot" else kind
    return label if rest in ("", str(DEFAULT_CYCLES)) else f"{label} {rest}"


def config_name(config: Mapping[str, Any], target: str) -> str:
    """The name of a run asked with ``config`` (config.json) at compression label ``target`` ("" leaves it out)."""
    parts = [f"{method_name(config.get('method', '?'))} {target}".strip(),
             allocation_name(config.get("allocation")), refine_name(config.get("refine"))]
    return " · ".join(part for part in parts if part)


def run_name(record: RunRecord) -> str:
    """``FISTAPruner 50% · OWL · DSnoT`` of one run (see the module doc)."""
    config = record.config if isinstance(record.config, dict) else {}
    return config_name(config, record.label)


def started(run_id: str, seconds: bool = False) -> str:
    """``22 Nov 19:13`` from a run id ``20261122-191329-…`` (the run id itself when it has no stamp)."""
    stamp = run_id[:15]
    if len(stamp) != 15 or stamp[8] != "-" or not (stamp[:8] + stamp[9:]).isdigit() or not 1 <= int(stamp[4:6]) <= 12:
        return run_id
    clock = f"{stamp[9:11]}:{stamp[11:13]}" + (f":{stamp[13:15]}" if seconds else "")
    return f"{int(stamp[6:8])} {MONTHS[int(stamp[4:6]) - 1]} {clock}"


def _seed(record: RunRecord) -> Any:
    config = record.config if isinstance(record.config, dict) else {}
    return config.get("seed")


def run_names(records: Sequence[RunRecord]) -> list[str]:
    """One distinct name per record, in order: :func:`run_name`, then what tells equal names apart.

    Equal names get ``seed N`` when their calibration seeds differ, then the start time (minutes,
    then seconds), then primes as a last resort (two runs started in the same second).
    """
    names = [run_name(record) for record in records]
    for refine in (_by_seed, lambda r: started(r.run_id), lambda r: started(r.run_id, seconds=True)):
        counts = Counter(names)
        names = [f"{name} · {refine(record)}" if counts[name] > 1 and _differs(refine, records, names, name) else name
                 for name, record in zip(names, records, strict=True)]
    counts = Counter(names)  # started in the same second: the time all the same, then primes
    names = [f"{name} · {started(record.run_id)}" if counts[name] > 1 else name
             for name, record in zip(names, records, strict=True)]
    seen: set[str] = set()
    unique = []
    for name in names:
        while name in seen:
            name += "′"
        seen.add(name)
        unique.append(name)
    return unique


def _by_seed(record: RunRecord) -> str:
    return f"seed {_seed(record)}"


def _differs(refine: Any, records: Sequence[RunRecord], names: Sequence[str], name: str) -> bool:
    """True when ``refine`` tells apart at least two of the records now called ``name``."""
    return len({refine(r) for r, n in zip(records, names, strict=True) if n == name}) > 1
