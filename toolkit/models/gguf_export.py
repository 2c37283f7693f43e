"""Write a PruneLab model as a GGUF that llama.cpp (and Ollama on top of it) loads.

The source GGUF the model came from gives everything that is not a weight: its metadata (hyper-
parameters, tokenizer, chat template) is copied key for key, with ``{arch}.block_count`` (and for
Gemma 3 the per-layer sliding-window pattern) rewritten from the model's own config when layers were
removed. The weights come from the model, named as llama.cpp's converter names them (the map is
transformers' reader's, inverted), with the converter's two transforms applied:

- llama: q_proj and k_proj rows permuted per head, W' = W[π] with
  π = arange(out).reshape(h, 2, out / 2h).swapaxes(1, 2).flatten() (h = kv heads for k_proj);
- Gemma: every norm weight stored as 1 + w (Gemma's RMSNorm computes x̂ · (1 + w)).

Each linear with a stored quantization state is written from its codes (:mod:`toolkit.models.gguf_blocks`):
code for code where the grid is a block type, otherwise re-quantized by the ``gguf`` package with the
relative error ‖Ŵ_gguf − Ŵ‖_F / ‖Ŵ‖_F reported. Every other tensor is written in the float type asked
(norms always in F32, as llama.cpp's converter does). The file is written under ``<name>.partial``
and renamed only when complete, so a failed write leaves nothing under the final name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from gguf import quants as gguf_quants
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.methods.quant_grid import QuantState, dequantize
from toolkit.models import gguf_blocks

ARCHES = {"llama": "llama", "gemma3_text": "gemma3", "gemma3": "gemma3", "qwen2": "qwen2"}  # model_type → GGUF
FLOAT_TYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16, "bf16": GGMLQuantizationType.BF16}
BLOCK_TYPES = {"q4_0": gguf_blocks.Q4_0, "q4_1": gguf_blocks.Q4_1, "q8_0": gguf_blocks.Q8_0}
FILE_TYPES = {GGMLQuantizationType.F32: LlamaFileType.ALL_F32, GGMLQuantizationType.F16: LlamaFileType.MOSTLY_F16,
              GGMLQuantizationType.BF16: LlamaFileType.MOSTLY_BF16, gguf_blocks.Q4_0: LlamaFileType.MOSTLY_Q4_0,
              gguf_blocks.Q4_1: LlamaFileType.MOSTLY_Q4_1, gguf_blocks.Q8_0: LlamaFileType.MOSTLY_Q8_0}
SKIPPED_KEYS = ("general.file_type", "general.quantization_version")  # written anew; GGUF.* are the header's


@dataclass
class ExportReport:
    """What an export wrote: tensors per type, linears written code for code, and re-quantized ones with their error."""

    path: Path
    bytes: int = 0
    types: dict[str, int] = field(default_factory=dict)
    exact: int = 0
    requantized: dict[str, float] = field(default_factory=dict)  # GGUF tensor name → relative Frobenius error

    def requant_error(self) -> float | None:
        """The largest relative error of a re-quantized linear (None when every linear was written exactly)."""
        return max(self.requantized.values()) if self.requantized else None


def gguf_arch(model_type: str) -> str:
    """The GGUF architecture of a transformers ``model_type`` (one line naming the supported ones otherwise)."""
    if model_type not in ARCHES:
        raise ToolkitError(f"GGUF export supports the llama, gemma3 and qwen2 families, not {model_type!r}")
    return ARCHES[model_type]


def tensor_names(model: nn.Module) -> dict[str, str]:
    """HF parameter name → GGUF tensor name, from transformers' GGUF reader map (inverted)."""
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    arch = gguf_arch(_config(model).model_type)
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config={})
    return {hf: name for name, hf in get_gguf_hf_weights_map(model, processor).items()}


def _config(model: nn.Module) -> Any:
    """The model's transformers config."""
    return getattr(model, "config")  # noqa: B009 - a transformers model's attribute, untyped on nn.Module


def head_rows(out: int, heads: int) -> np.ndarray:
    """π of llama.cpp's q/k permutation: row r of the GGUF tensor is row π[r] of the HF weight."""
    return np.arange(out).reshape(heads, 2, out // heads // 2).swapaxes(1, 2).reshape(out)


def row_order(arch: str, gguf_name: str, config: Any) -> np.ndarray | None:
    """The row permutation llama.cpp's converter applies to this tensor (None: rows as they are)."""
    if arch != "llama":
        return None
    if ".attn_q." in gguf_name:
        return head_rows(_rows(config, config.num_attention_heads), config.num_attention_heads)
    if ".attn_k." in gguf_name:
        kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        return head_rows(_rows(config, kv), kv)
    return None


def _rows(config: Any, heads: int) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return heads * head_dim


def norm_offset(arch: str, gguf_name: str) -> float:
    """What llama.cpp's converter adds to a norm weight: 1 for Gemma (x̂ · (1 + w)), else 0."""
    return 1.0 if arch.startswith("gemma") and "norm.weight" in gguf_name else 0.0


def _raw(field_: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """A reader field as (value, type, sub type); strings as raw bytes so nothing is re-encoded."""
    main = field_.types[0]
    if main == GGUFValueType.ARRAY:
        sub = field_.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field_.parts[i]) for i in field_.data], main, sub
        return list(field_.contents()), main, sub
    if main == GGUFValueType.STRING:
        return bytes(field_.parts[field_.data[0]]), main, None
    return field_.contents(), main, None


def copy_metadata(reader: GGUFReader, writer: GGUFWriter, overrides: dict[str, tuple[Any, GGUFValueType,
                                                                                    GGUFValueType | None]]) -> None:
    """Every key of the source but the header's and the file type, with ``overrides`` replacing or adding keys."""
    for name, field_ in reader.fields.items():
        if name.startswith("GGUF.") or name in SKIPPED_KEYS or name == "general.architecture" or name in overrides:
            continue
        value, vtype, sub = _raw(field_)
        writer.add_key_value(name, value, vtype, sub_type=sub)
    for name, (value, vtype, sub) in overrides.items():
        writer.add_key_value(name, value, vtype, sub_type=sub)


def structure_overrides(arch: str, config: Any) -> dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]:
    """Keys the model's own config decides: layer count, head counts and width, FFN width, Gemma 3's sliding layers.

    A depth run or a shrink that kept every layer alike changes them; the source's other keys stay.
    """
    u32 = GGUFValueType.UINT32
    keys: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]] = {
        f"{arch}.block_count": (int(config.num_hidden_layers), u32, None),
        f"{arch}.attention.head_count": (int(config.num_attention_heads), u32, None),
        f"{arch}.attention.head_count_kv": (int(getattr(config, "num_key_value_heads", None)
                                                or config.num_attention_heads), u32, None),
        f"{arch}.feed_forward_length": (int(config.intermediate_size), u32, None)}
    head_dim = getattr(config, "head_dim", None)
    if head_dim:  # llama.cpp takes n_embd / n_head otherwise, which a shrink that removed heads no longer equals
        keys[f"{arch}.attention.key_length"] = (int(head_dim), u32, None)
        keys[f"{arch}.attention.value_length"] = (int(head_dim), u32, None)
    layer_types = getattr(config, "layer_types", None)
    if arch == "gemma3" and layer_types:
        keys[f"{arch}.attention.sliding_window_pattern"] = (
            [kind == "sliding_attention" for kind in layer_types], GGUFValueType.ARRAY, GGUFValueType.BOOL)
    return keys


def float_data(weight: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """A float32 array in F32, F16 or BF16 (BF16 as uint16 words, rounded to nearest even by ``gguf``)."""
    if qtype == GGMLQuantizationType.F32:
        return np.ascontiguousarray(weight, dtype=np.float32)
    if qtype == GGMLQuantizationType.F16:
        return np.ascontiguousarray(weight.astype(np.float16))
    return gguf_quants.quantize(np.ascontiguousarray(weight, dtype=np.float32), qtype)


def _relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm((a - b).ravel()) / max(float(np.linalg.norm(b.ravel())), 1e-30))


def quant_data(state: QuantState, rows: np.ndarray | None, want: GGMLQuantizationType | None
               ) -> tuple[np.ndarray, GGMLQuantizationType, float | None]:
    """A linear's state as blocks: (bytes, type, None) code for code, or (bytes, type, error) re-quantized.

    ``want`` None takes the type that holds the grid exactly, else Q4_1 (asymmetric) / Q4_0 (symmetric)
    for b ≤ 4 bits and Q8_0 above; a ``want`` that cannot hold the grid re-quantizes to it.
    """
    if rows is not None:
        order = torch.from_numpy(rows)
        state = QuantState(state.codes[order], state.scales[order], state.zeros[order], state.spec)
    spec, columns = state.spec, state.shape[1]
    exact = gguf_blocks.exact_type(spec.bits, spec.group_size, spec.symmetric, columns)
    qtype = want or exact or (gguf_blocks.Q8_0 if spec.bits > 4 else
                              gguf_blocks.Q4_0 if spec.symmetric else gguf_blocks.Q4_1)
    if exact is not None and gguf_blocks.holds(qtype, spec.bits, spec.symmetric):
        return gguf_blocks.pack(state.codes.numpy(), state.scales.numpy(), state.zeros.numpy(), spec.bits,
                                spec.group_size, qtype), qtype, None
    if columns % gguf_blocks.BLOCK:
        raise ToolkitError(f"a linear with {columns} inputs cannot be written in {gguf_blocks.BLOCK}-input GGUF "
                           "blocks; export it with --type f16")
    weight = dequantize(state).numpy()
    data = gguf_quants.quantize(weight, qtype)
    return data, qtype, _relative_error(gguf_quants.dequantize(data, qtype), weight)


def _tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's weights once each (a tied lm_head is the embedding: llama.cpp reads it from there)."""
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        yield name, tensor.detach()


def native_float(model: nn.Module) -> str:
    """The float type a model's weights export in by default: BF16 for a bfloat16 model, else F16.

    F16 may not hold a bfloat16 model's range.
    """
    return "bf16" if next(model.parameters()).dtype == torch.bfloat16 else "f16"


@dataclass(frozen=True)
class ExportTypes:
    """The types asked for the weights written as floats and for the quantized linears.

    ``floats`` (f32 | f16 | bf16): every weight written as floats but the norms (always F32); ``blocks``
    (q4_0 | q4_1 | q8_0, or None: the type that holds each grid) the quantized linears.
    """

    floats: str = "f16"
    blocks: str | None = None


def _float_tensor(tensor: torch.Tensor, arch: str, name: str, rows: np.ndarray | None, floats: GGMLQuantizationType
                  ) -> tuple[np.ndarray, GGMLQuantizationType]:
    """A weight as llama.cpp's converter writes it: rows permuted, Gemma's norms + 1, 1-D tensors in F32."""
    weight = tensor.to(torch.float32).cpu().numpy()
    weight = weight[rows] if rows is not None else weight
    weight = weight + norm_offset(arch, name)
    qtype = GGMLQuantizationType.F32 if weight.ndim == 1 else floats
    return float_data(weight, qtype), qtype


def _add_tensors(writer: GGUFWriter, model: nn.Module, states: dict[str, QuantState], types: ExportTypes,
                 report: ExportReport, progress: Callable[[str], None] | None) -> GGMLQuantizationType:
    """Every weight of ``model`` into ``writer``; returns the type of the linears (the file's type)."""
    config = _config(model)
    arch = gguf_arch(config.model_type)
    names = tensor_names(model)
    floats = FLOAT_TYPES[types.floats]
    want = BLOCK_TYPES[types.blocks] if types.blocks else None
    main_type = floats
    for hf_name, tensor in _tensors(model):
        if hf_name not in names:
            raise ToolkitError(f"no GGUF name for the model's tensor {hf_name!r}: the export does not know this layout")
        name = names[hf_name]
        rows = row_order(arch, name, config)
        if hf_name in states:
            data, qtype, error = quant_data(states[hf_name], rows, want)
            main_type = qtype
            if error is None:
                report.exact += 1
            else:
                report.requantized[name] = error
        else:
            data, qtype = _float_tensor(tensor, arch, name, rows, floats)
        writer.add_tensor(name, data, raw_dtype=qtype)
        report.types[qtype.name] = report.types.get(qtype.name, 0) + 1
        if progress is not None:
            progress(name)
    return main_type


def export_gguf(model: nn.Module, states: dict[str, QuantState], source: Path, out: Path,
                types: ExportTypes = ExportTypes(), progress: Callable[[str], None] | None = None) -> ExportReport:
    """Write ``model`` as GGUF ``out`` with the metadata of ``source`` (see the module docstring).

    ``states`` maps a linear's weight name (``model.layers.3.self_attn.q_proj.weight``) to its stored
    quantization state, written as blocks; every other weight is written as floats (:class:`ExportTypes`).
    """
    config = _config(model)
    arch = gguf_arch(config.model_type)
    reader = GGUFReader(source)
    source_arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    if source_arch != arch:
        raise ToolkitError(f"the source GGUF {source.name} is a {source_arch!r} model, the run's model a {arch!r} one")
    report = ExportReport(path=out)
    partial = out.with_name(out.name + ".partial")
    writer = GGUFWriter(partial, arch)
    try:
        main_type = _add_tensors(writer, model, states, types, report, progress)
        copy_metadata(reader, writer, structure_overrides(arch, config))
        writer.add_file_type(FILE_TYPES[main_type])
        writer.add_quantization_version(2)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        partial.replace(out)
    except OSError as exc:
        writer.close()
        partial.unlink(missing_ok=True)
        raise ToolkitError(f"could not write {out} ({exc.strerror or exc}); nothing was left under that name") from None
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    report.bytes = out.stat().st_size
    return report
