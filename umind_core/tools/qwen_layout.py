"""Write a folder in the file layout of Qwen3-VL-4B-Instruct as the hub ships it, with random bf16 weights.

Nothing here can download the real model, but everything except the trained weights can be made offline: the
published configs and chat template (`qwen_published`), Qwen's real BPE tokenizer (`qwen_vocab`), and weights
under the real tensor names, sharded as `model-0000N-of-0000M.safetensors` with `model.safetensors.index.json`.
Such a folder exercises the real loading path (sharded safetensors, the hub tokenizer in which the box and
object-ref tokens already exist, the processor configs) on this machine, for tests and benchmarks.

Two shapes: "4b" (the published config, about 8.9 GB) and "small" (the same vocabulary, special-token ids,
attention geometry and processor, with 2 narrow layers: about 40 MB, for CI). Shards are written one tensor at a
time, so writing the 4B needs about one embedding matrix of memory, not the model.
"""

from __future__ import annotations

import copy
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..atomic import atomic_path, new_temp_dir, replace_dir, write_text
from . import qwen_published as pub
from .qwen_vocab import write_tokenizer_files

__all__ = ["VARIANTS", "LayoutError", "variant_config", "tensor_specs", "plan_shards", "write_layout"]

INDEX_FILE = "model.safetensors.index.json"
_INIT_STD = 0.02


class LayoutError(ValueError):
    """A bad layout request (unknown variant, target not empty); the message names it."""


@dataclass(frozen=True)
class _Variant:
    text: dict
    vision: dict
    max_shard_bytes: int


#: "small" keeps the 4B's vocabulary (151,936 rows), head_dim 128 and mrope sections; only widths and depths shrink.
VARIANTS: dict[str, _Variant] = {
    "4b": _Variant({}, {}, pub.MAX_SHARD_BYTES_4B),
    "small": _Variant(
        {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1},
        {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2, "out_hidden_size": 128,
         "deepstack_visual_indexes": [0, 1]},
        16_000_000,
    ),
}


def variant_config(variant: str) -> dict:
    """config.json of a variant: the published one with the variant's sizes."""
    if variant not in VARIANTS:
        raise LayoutError(f"unknown layout variant {variant!r}; choose one of {sorted(VARIANTS)}")
    spec = VARIANTS[variant]
    config = copy.deepcopy(pub.CONFIG_4B)
    config["text_config"].update(spec.text)
    config["vision_config"].update(spec.vision)
    return config


def tensor_specs(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every stored tensor, in the model's own order; a tied lm_head is not stored."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(Qwen3VLConfig.from_dict(copy.deepcopy(config)))
    tied = bool(config.get("tie_word_embeddings"))
    return [(name, tuple(t.shape)) for name, t in model.state_dict().items()
            if not (tied and name == "lm_head.weight")]


def plan_shards(specs: list[tuple[str, tuple[int, ...]]], max_shard_bytes: int) -> list[list[tuple[str, tuple]]]:
    """Fill shards in order up to max_shard_bytes (bf16); a tensor larger than that gets a shard of its own."""
    shards: list[list[tuple[str, tuple]]] = [[]]
    size = 0
    for name, shape in specs:
        nbytes = 2 * _numel(shape)
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    return shards


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _random_tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """bf16 weights a model can run on: norms 1, biases 0, the rest N(0, 0.02); the same for a name and seed."""
    if name.endswith(".weight") and "norm" in name.rsplit(".", 2)[-2]:  # RMSNorm / LayerNorm scales
        return torch.ones(shape, dtype=torch.bfloat16)
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    return (torch.randn(shape, generator=gen) * _INIT_STD).to(torch.bfloat16)


def _header(entries: list[tuple[str, tuple]]) -> bytes:
    """The safetensors header: JSON of names, dtypes, shapes and byte ranges, space-padded to 8 bytes."""
    meta: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in entries:
        end = offset + 2 * _numel(shape)
        meta[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(meta, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def _write_shard(path: Path, entries: list[tuple[str, tuple]], seed: int) -> None:
    """One safetensors file, streamed: only the tensor being written is in memory."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(_header(entries))
        for name, shape in entries:
            tensor = _random_tensor(name, shape, seed).contiguous()
            fh.write(tensor.view(torch.int16).numpy().data)
            del tensor


def _weight_files(folder: Path, config: dict, max_shard_bytes: int, seed: int) -> Iterator[Path]:
    shards = plan_shards(tensor_specs(config), max_shard_bytes)
    total = len(shards)
    weight_map, total_bytes, total_params = {}, 0, 0
    for i, entries in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{total:05d}.safetensors"
        _write_shard(folder / name, entries, seed)
        for tensor, shape in entries:
            weight_map[tensor] = name
            total_params += _numel(shape)
        total_bytes += 2 * sum(_numel(s) for _, s in entries)
        yield folder / name
    index = {"metadata": {"total_parameters": total_params, "total_size": total_bytes},
             "weight_map": dict(sorted(weight_map.items()))}
    yield write_text(folder / INDEX_FILE, json.dumps(index, indent=2) + "\n")


def _config_files(folder: Path, config: dict) -> list[Path]:
    def dump(data: dict) -> str:
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    return [
        write_text(folder / "config.json", dump(config)),
        write_text(folder / "generation_config.json", dump(pub.GENERATION_CONFIG)),
        write_text(folder / "preprocessor_config.json", dump(pub.PREPROCESSOR_CONFIG)),
        write_text(folder / "video_preprocessor_config.json", dump(pub.VIDEO_PREPROCESSOR_CONFIG)),
        write_text(folder / "chat_template.json", json.dumps({"chat_template": pub.CHAT_TEMPLATE}, indent=4) + "\n"),
    ]


def write_layout(folder: str | Path, variant: str = "small", seed: int = 0, overwrite: bool = False,
                 max_shard_bytes: int | None = None) -> Path:
    """Write the whole folder beside its target and rename it into place (no half-made model folder is seen)."""
    folder = Path(folder).expanduser()
    config = variant_config(variant)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise LayoutError(f"{folder} exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    tmp = new_temp_dir(folder)
    try:
        _config_files(tmp, config)
        write_tokenizer_files(tmp, pub.CHAT_TEMPLATE)
        for _ in _weight_files(tmp, config, max_shard_bytes or VARIANTS[variant].max_shard_bytes, seed):
            pass
        replace_dir(tmp, folder)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
