"""Checks of a Qwen3-VL base folder that run before any weight is read.

A hub folder that is incomplete or of the wrong kind otherwise fails deep inside transformers (a KeyError in a
loader, a shape mismatch, or worse: a tensor the index names but no shard holds is silently left at its random
initialisation). Reading only config.json, the index, each shard's small header and the tokenizer's token list
finds those faults in well under a second, and the error names the file and what is wrong with it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

__all__ = ["BaseFolderError", "check_base_folder", "check_weights", "check_tokenizer", "read_config",
           "safetensors_names"]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_HEADER = 100_000_000  # a safetensors header larger than this is not one
_EARLIER_QWEN_VL = {"qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL"}
#: token -> the config key that must hold its id (None: only its presence is required)
_REQUIRED_TOKENS = {"<|image_pad|>": "image_token_id", "<|video_pad|>": "video_token_id",
                    "<|vision_start|>": "vision_start_token_id", "<|vision_end|>": "vision_end_token_id",
                    "<|im_start|>": None, "<|im_end|>": None, "<|endoftext|>": None}


class BaseFolderError(ValueError):
    """A base folder that cannot be loaded; the message names the file and the fault."""


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise BaseFolderError(f"{path} is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaseFolderError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BaseFolderError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def read_config(folder: Path) -> dict:
    """config.json, checked to be a Qwen3-VL model (Qwen2-VL and Qwen2.5-VL are named as such)."""
    path = folder / "config.json"
    config = _read_json(path)
    model_type = config.get("model_type")
    if model_type in _EARLIER_QWEN_VL:
        raise BaseFolderError(
            f"{path}: this is a {_EARLIER_QWEN_VL[model_type]} model (model_type {model_type!r}); UMind needs a "
            "Qwen3-VL base (patch 16, DeepStack, interleaved M-RoPE), e.g. Qwen3-VL-4B-Instruct"
        )
    if model_type != "qwen3_vl":
        raise BaseFolderError(f"{path} holds a {model_type!r} model; UMind needs a Qwen3-VL (qwen3_vl) base")
    return config


def safetensors_names(path: Path) -> set[str]:
    """Tensor names in a safetensors file, from its header only (8-byte length + JSON)."""
    if not path.is_file():
        raise BaseFolderError(f"{path} is missing")
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise BaseFolderError(f"{path} is not a safetensors file (shorter than its header length)")
        (size,) = struct.unpack("<Q", head)
        if size > _MAX_HEADER or size > path.stat().st_size - 8:
            raise BaseFolderError(f"{path} is not a safetensors file (header length {size} is impossible)")
        try:
            header = json.loads(fh.read(size))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BaseFolderError(f"{path} has a corrupt safetensors header: {exc}") from None
    if not isinstance(header, dict):
        raise BaseFolderError(f"{path} has a corrupt safetensors header")
    return {name for name in header if name != "__metadata__"}


def check_weights(folder: Path) -> None:
    """The weights are all there: one model.safetensors, or an index whose every shard holds what it names."""
    folder = Path(folder)
    index_path = folder / INDEX_FILE
    if not index_path.is_file():
        if not (folder / SINGLE_FILE).is_file():
            raise BaseFolderError(f"{folder} has no weights: neither {SINGLE_FILE} nor {INDEX_FILE}")
        safetensors_names(folder / SINGLE_FILE)
        return
    weight_map = _read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise BaseFolderError(f"{index_path} has no weight_map (tensor name -> shard file)")
    by_shard: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(str(shard), []).append(tensor)
    missing = sorted(s for s in by_shard if not (folder / s).is_file())
    if missing:
        raise BaseFolderError(f"{index_path} names shard(s) that {folder} does not have: {', '.join(missing)}")
    for shard, tensors in sorted(by_shard.items()):
        held = safetensors_names(folder / shard)
        absent = sorted(t for t in tensors if t not in held)
        if absent:
            more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
            raise BaseFolderError(f"{index_path} maps {', '.join(absent[:3])}{more} to {folder / shard}, "
                                  "which does not hold it")


def _token_ids(folder: Path) -> dict[Path, dict[str, int]]:
    """Added-token ids as each tokenizer file present declares them."""
    found: dict[Path, dict[str, int]] = {}
    tok_json = folder / "tokenizer.json"
    if tok_json.is_file():
        added = _read_json(tok_json).get("added_tokens") or []
        found[tok_json] = {t.get("content"): t.get("id") for t in added if isinstance(t, dict)}
    tok_config = folder / "tokenizer_config.json"
    decoder = _read_json(tok_config).get("added_tokens_decoder")
    if isinstance(decoder, dict):
        found[tok_config] = {v.get("content"): int(k) for k, v in decoder.items()
                             if isinstance(v, dict) and str(k).isdigit()}
    return found


def check_tokenizer(folder: Path, config: dict) -> None:
    """Every tokenizer file has Qwen's chat and vision tokens, at the ids config.json gives the model."""
    folder = Path(folder)
    for path, ids in _token_ids(folder).items():
        for token, key in _REQUIRED_TOKENS.items():
            if token not in ids:
                raise BaseFolderError(f"{path} has no {token} token: not a Qwen3-VL tokenizer")
            want = config.get(key) if key else None
            if want is not None and ids[token] != want:
                raise BaseFolderError(f"{path} gives {token} the id {ids[token]}, but config.json's {key} is {want}")


def check_base_folder(folder: str | Path) -> dict:
    """All checks of a hub-style Qwen3-VL folder; returns its config. Reads no weights."""
    folder = Path(folder)
    config = read_config(folder)
    check_tokenizer(folder, config)
    check_weights(folder)
    return config
