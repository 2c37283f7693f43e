"""``python -m toolkit models``: the models PruneLab runs offline, their licences and where they stand."""

from __future__ import annotations

import argparse
import json
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.models.embedded import EMBEDDED_MODELS, check_installed, licence_path
from toolkit.models.gguf_cache import CONVERTED, embedded_cache
from toolkit.models.sources import TINY_FAMILIES


def models_record() -> list[dict[str, Any]]:
    """One entry per embedded model: name, label, licence, held dtype, installed, converted (cached) or not."""
    entries = []
    for model in EMBEDDED_MODELS.values():
        try:
            check_installed(model.name)
            missing = ""
        except ToolkitError as exc:
            missing = str(exc)
        licence = licence_path(model)
        entries.append({"name": model.name, "label": model.label, "licence": model.licence,
                        "licence_file": None if licence is None else str(licence), "dtype": model.dtype,
                        "source": f"{model.quantization} GGUF", "packages": list(model.packages),
                        "installed": not missing, "missing": missing,
                        "converted": (embedded_cache(model) / CONVERTED).is_file()})
    return entries


def run_models(args: argparse.Namespace) -> int:
    """Print the embedded models (or their JSON) and the tiny test models."""
    entries = models_record()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    for entry in entries:
        state = ("installed, " + ("converted" if entry["converted"] else "converted on first use (once)")
                 if entry["installed"] else f"NOT installed: {entry['missing']}")
        print(f"{entry['name']:<14} {entry['label']}; held in {entry['dtype']}; licence: {entry['licence']}"
              + (f" ({entry['licence_file']})" if entry["licence_file"] else ""))
        print(f"{'':<14} {state}")
    print(f"{'tiny-*':<14} random test models: {', '.join('tiny-' + f for f in TINY_FAMILIES)}")
    print(f"{'':<14} also: a checkpoint or run folder, a .gguf file, a Hugging Face hub id (where a hub is reachable)")
    return 0
