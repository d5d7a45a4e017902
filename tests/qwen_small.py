"""The real-vocabulary small Qwen3-VL folder for tests, and a way to make its random weights answer on cue.

`write_layout(..., "small")` gives a hub-layout folder (Qwen's BPE tokenizer, published configs, sharded bf16
weights) whose random weights answer noise. `plant_answer` turns it into a folder that deterministically answers
one text, so that a grounded answer with a mask can be followed through the Predictor and the server without
training (training the 152k-row vocabulary to memorise an answer takes about a minute here):

- every text layer's attention and MLP output projections are zeroed, so the last hidden state at a position is
  the embedding of that position's token, and the next token depends on the current one only;
- the embedding rows of the chain (the prompt's last token, then each answer token) are set so that, through the
  tied LM head, each token's best successor is the next one in the chain. The logits are a symmetric bilinear
  form of the embeddings, so the rows come from the eigen-decomposition of a tridiagonal Gram matrix with
  growing off-diagonals, and the final norm's weights carry the signs of its eigenvalues.

The vision tower, image tokens and mask decoder stay random: the mask is real decoder output, not a planted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from umind_core.atomic import atomic_path

_EMBED = "model.language_model.embed_tokens.weight"
_NORM = "model.language_model.norm.weight"


def _chain_rows(n: int, scale: float = 400.0) -> tuple[np.ndarray, np.ndarray]:
    """(n, n) embedding rows and n norm signs whose bilinear form is tridiagonal, off-diagonals growing."""
    gram = np.zeros((n, n))
    for i in range(n - 1):
        gram[i, i + 1] = gram[i + 1, i] = scale * (1.0 + i / n)
    values, vectors = np.linalg.eigh(gram)
    rows = vectors * np.sqrt(np.abs(values))[None, :]
    return rows, np.sign(values)


def plant_answer(folder: Path, chain: list[int]) -> None:
    """Rewrite the folder's shards so that greedy decoding after chain[0] emits chain[1:] (ids must be distinct)."""
    from safetensors.torch import load_file, save_file

    if len(set(chain)) != len(chain):
        raise ValueError(f"chain token ids must be distinct, got {chain}")
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    rows, signs = _chain_rows(len(chain))
    for shard in sorted(set(index.values())):
        tensors = load_file(str(folder / shard))
        for name in tensors:
            if name.startswith("model.language_model.layers.") and name.endswith(("o_proj.weight", "down_proj.weight")):
                tensors[name] = torch.zeros_like(tensors[name])
        if _EMBED in tensors:
            embed = tensors[_EMBED].float()
            embed[chain, :] = 0.0
            embed[chain, : len(chain)] = torch.from_numpy(rows).float()
            tensors[_EMBED] = embed.to(torch.bfloat16)
        if _NORM in tensors:
            norm = tensors[_NORM].float()
            norm[: len(chain)] = torch.from_numpy(signs).float()
            tensors[_NORM] = norm.to(torch.bfloat16)
        with atomic_path(folder / shard) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
