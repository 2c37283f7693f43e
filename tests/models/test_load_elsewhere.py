"""A pack-quantized checkpoint loads with plain transformers in a clean environment made by docs/cli.md's lines.

The lines are built from the pins (requirements.txt, the Makefile's torch) plus ``psutil``, which
compressed-tensors imports to load a checkpoint without declaring it. The slow test makes a fresh
``python -m venv`` (no site packages), installs exactly those lines with pip (torch from the
Makefile's CPU index first, as ``make setup`` does; pip's own cache is reused), loads the checkpoint
there in a subprocess and compares the logits with the in-memory model's.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import venv
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

from tests.models.test_save_quant import fake_quantize_
from toolkit.models.load import load_model
from toolkit.models.save_quant import save_quantized
from toolkit.spec.compression import QuantSpec

ROOT = Path(__file__).parents[2]
PINNED = ("transformers", "tokenizers", "huggingface_hub", "safetensors", "compressed-tensors")
PSUTIL = "psutil==7.2.2"  # compressed_tensors/offload/load.py imports it; its metadata does not require it
LOADER = """
import sys, torch
from transformers import AutoModelForCausalLM
data = torch.load(sys.argv[2], weights_only=True)
with torch.no_grad():
    logits = AutoModelForCausalLM.from_pretrained(sys.argv[1])(data["ids"]).logits
torch.save(logits, sys.argv[3])
"""


def _make(name: str) -> str:
    return re.search(rf"^{name} \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)  # type: ignore[union-attr]


def install_lines() -> tuple[list[str], list[str]]:
    """The two ``pip install`` argument lists: torch from its CPU index, then the rest, all pinned."""
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE))
    torch_line = [f"torch=={_make('TORCH_VERSION')}", "--index-url", _make("TORCH_INDEX")]
    return torch_line, [*(f"{name}=={pins[name]}" for name in PINNED), PSUTIL]


def test_the_docs_give_exactly_these_lines() -> None:
    torch_line, rest = install_lines()
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert f"pip install {' '.join(torch_line)}\n" in docs
    assert f"pip install {' '.join(rest)}\n" in docs


def _index_reachable() -> str:
    """"" when the package index answers a connect, else why not."""
    host = urlparse(os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")).hostname or "pypi.org"
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError as exc:
        return f"the package index {host} is not reachable ({exc}): no clean environment can be installed"
    return ""


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=1200)


@pytest.mark.slow  # a fresh environment with torch: 3 min 20 s on a 2-core CPU with pip's cache warm
def test_a_clean_environment_loads_the_checkpoint_with_plain_transformers(tmp_path: Path) -> None:
    if reason := _index_reachable():
        pytest.skip(reason)
    loaded = load_model("tiny-llama")
    states = fake_quantize_(loaded.model, QuantSpec(4, 32))  # the in-memory model computes dequantize(codes)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = loaded.model(ids).logits
    save_quantized(loaded.model, loaded.codec, tmp_path / "ckpt", states)
    torch.save({"ids": ids}, tmp_path / "ids.pt")

    venv.create(tmp_path / "env", with_pip=True)  # no system site packages: only what the lines install
    python = tmp_path / "env" / "bin" / "python"
    torch_line, rest = install_lines()
    done = _pip(python, "--retries", "0", "--timeout", "30", *torch_line)
    if done.returncode:  # as `make setup`: where the CPU index is out of reach, torch from the default index
        done = _pip(python, torch_line[0])
    assert done.returncode == 0, done.stderr[-2000:]
    done = _pip(python, *rest)
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "load.py").write_text(LOADER)
    run = subprocess.run([str(python), str(tmp_path / "load.py"), str(tmp_path / "ckpt"), str(tmp_path / "ids.pt"),
                          str(tmp_path / "logits.pt")], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    got = torch.load(tmp_path / "logits.pt", weights_only=True)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    clean = subprocess.run([str(python), "-c", "import importlib.util as u, sys; "
                            "sys.exit(any(u.find_spec(m) for m in ('toolkit', 'accelerate')))"], cwd=tmp_path)
    assert clean.returncode == 0  # neither PruneLab nor accelerate was there: the lines alone loaded it
