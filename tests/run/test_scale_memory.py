"""Real scale on a CPU: a Llama-2-7B-shaped decoder layer stored in bfloat16 prunes within a host-memory bound
and is saved in bfloat16 (docs/scale.md).

The model (hidden 4096, MLP 11008, 32 heads, vocabulary 32000, one decoder layer: 464 M parameters, 885 MiB
in bfloat16) is built in the test with random weights and pruned by the CLI in a child process, whose peak
resident memory (``peak_rss_mb`` of its result, the kernel's high-water mark) is then read. Before the model's
own dtype was kept, the same run loaded float32 weights, peaked at 6.2 × the bfloat16 weights and saved float32.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec

pytestmark = pytest.mark.slow

# the goal for the child's peak: 1.25 × the bfloat16 weights (885.6 MiB) + 1.2 GiB = 2336.6 MiB. Measured with
# bench_scale on the same shape and run (docs/scale.md "Host memory of a 7B layer"): 3234–3452 MiB before the
# k-th value masks in row chunks, the swapped write-back, the fixed mmap threshold and the journal on disk for
# large layers; 2302 MiB once the checkpoint's mapped pages are released after they are copied; this test's child
# 2090 MiB since the methods that only read W get no copy of it and Wanda scores a block of rows at a time. The
# peak is the child's own high-water mark (VmHWM, toolkit/runtime/rss.py): ru_maxrss carried this test process's
# peak into the child, which once read 5258 MiB inside the whole suite.
RSS_GOAL_TIMES, RSS_GOAL_PLUS_MIB = 1.25, 1.2 * 1024


def _seven_b_layer(folder: Path) -> int:
    """Write a 1-layer Llama-2-7B-shaped bfloat16 checkpoint with random weights to ``folder``; its parameters."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=1, num_attention_heads=32,
                         num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, dtype="bfloat16")
    torch.manual_seed(0)
    with init_empty_weights():  # parameters on meta (no slow random init), buffers (rotary tables) computed
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None:
                data = torch.ones(param.shape, dtype=param.dtype) if "norm" in type(module).__name__.lower() else \
                    torch.empty(param.shape, dtype=param.dtype).normal_(0.0, 0.02)
                module._parameters[name] = torch.nn.Parameter(data, requires_grad=False)
    model.save_pretrained(folder)
    (folder / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": ByteCodec.bos_id}))
    return sum(p.numel() for p in model.parameters())


def _safetensors_dtypes(folder: Path) -> set[str]:
    """The dtypes of every tensor in the folder's safetensors files (read from their headers)."""
    dtypes: set[str] = set()
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        dtypes |= {entry["dtype"] for key, entry in header.items() if key != "__metadata__"}
    return dtypes


@pytest.mark.parametrize("stream", [False, True], ids=["in-memory", "streamed"])
def test_seven_b_layer_prunes_in_bf16_within_the_memory_bound(tmp_path: Path, stream: bool) -> None:
    source = tmp_path / "llama-7b-1layer"
    params = _seven_b_layer(source)
    weights_mib = params * 2 / 2**20
    out, report = tmp_path / "runs", tmp_path / "result.json"
    env = dict(os.environ, OMP_NUM_THREADS="2")
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "prune", "--model", str(source), "--method", "wanda", "--nsamples", "2",
         "--seqlen", "256", "--eval", "none", "--device", "cpu", "--stream" if stream else "--save-model",
         "--out", str(out), "--json", str(report)],
        capture_output=True, text=True, env=env, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(report.read_text())
    assert result["precision"]["storage"] == "bfloat16" and result["precision"]["saved"] == "bfloat16"
    assert result["precision"]["layer_on_device"] == "float32"  # a CPU without bf16 passes: one layer upcast
    checkpoint = Path(result["checkpoint"]["folder"])
    assert _safetensors_dtypes(checkpoint) == {"BF16"}
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "bfloat16"
    assert result["checkpoint"]["bytes"] < 1.05 * params * 2  # bfloat16 on disk, not float32 (2 ×)
    assert abs(result["achieved_sparsity"] - 0.5) < 1e-6
    assert set(result["phases"]) >= {"capture", "copies", "statistics", "solve", "propagation"}
    goal = RSS_GOAL_TIMES * weights_mib + RSS_GOAL_PLUS_MIB
    assert result["peak_rss_mb"] <= goal, (f"peak {result['peak_rss_mb']:.0f} MiB > goal {goal:.0f} MiB "
                                           f"({weights_mib:.0f} MiB of weights)")
