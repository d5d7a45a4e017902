"""A class score for a diagnose question: how likely the model finds each finding as the whole answer.

A generated answer names one class, so a benchmark can only count it right or wrong; an area under the ROC curve
(how BUSI results are usually compared) needs a score that ranks images. Scoring each candidate answer
("Normal.", "Benign.", "Malignant.", spelt as training writes them: `conversations._diagnose`) by the model's
log-likelihood after the question, teacher-forced in one batch, gives that score without a new head: the
probabilities over the candidates are a softmax of those log-likelihoods. The argmax is the model's forced choice,
which never leaves a question unanswered. Only the class word's tokens count, not the end of the turn: a trained
answer may go on after its class word ("Benign. Oval circumscribed mass..."), so "Benign." followed by the end of
the turn is unlikely where "Benign." followed by its cues is the answer; scored whole, the short "Normal." won on
images the model answers benign.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..data.manifest import Conversation
from ..answers.findings import FINDINGS
from ..training.collate import IGNORE_INDEX, collate, encode_turns

__all__ = ["class_scores", "auc"]


def _answer(finding: str) -> str:
    """A finding as a diagnose answer of the training data ("benign" -> "Benign.")."""
    return finding.strip().rstrip(".").capitalize() + "."


@torch.no_grad()
def class_scores(model, image: np.ndarray, question: str, classes: Sequence[str] = FINDINGS) -> dict[str, float]:
    """Each class's probability as the answer to `question` on `image` (they sum to 1 over `classes`)."""
    samples = [encode_turns(model.processor, image, [Conversation("diagnose", [
        {"role": "user", "content": question}, {"role": "assistant", "content": _answer(c)}], [])], (),
        model.num_mask_tokens) for c in classes]
    tokenizer = model.processor.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = collate(samples, pad)
    labels = batch.pop("labels")
    batch.pop("mask_targets")
    logits = model(**{k: v.to(model.device) for k, v in batch.items()}, decode_masks=False).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    target = labels[:, 1:].to(logp.device)
    keep = target != IGNORE_INDEX
    words = [len(tokenizer(_answer(c), add_special_tokens=False)["input_ids"]) for c in classes]
    for b, n in enumerate(words):  # the first n answer positions are the class word; the rest ends the turn
        keep[b, keep[b].nonzero().flatten()[n:]] = False
    picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    total = (picked * keep).sum(dim=1)
    probs = torch.softmax(total, dim=0).cpu().numpy()
    return {c: float(p) for c, p in zip(classes, probs)}


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Area under the ROC curve (the Mann-Whitney statistic, ties counted half); None without both classes."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(positive, dtype=bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))
