"""A Predictor whose model answers a fixed text: for tests of what happens to an answer after the model (parsing,
views, writers), which an untrained tiny model cannot give on purpose."""

from __future__ import annotations

import torch

from umind_core.inference.decode_batch import Decoded


def force_answer(monkeypatch, text: str, mask_groups: int = 0) -> None:
    """Every answer is `text`; its mask groups get fixed random queries (the decoder still runs)."""
    from umind_core.inference import predictor as P

    original = P.Predictor._result
    gen = torch.Generator().manual_seed(0)

    def _result(self, frames, features, dec, task, prompt, warnings):
        ids = self.model.tokenizer.encode(text, add_special_tokens=False)
        width = features[0].shape[-1]  # a mask query is a hidden state, as the image features are
        queries = [torch.randn(self.model.num_mask_tokens, width, generator=gen) for _ in range(mask_groups)]
        forced = Decoded(token_ids=ids, token_probs=[1.0] * len(ids), forced=[False] * len(ids),
                         mask_queries=queries)
        return original(self, frames, features, forced, task, prompt, warnings)

    monkeypatch.setattr(P.Predictor, "_result", _result)
