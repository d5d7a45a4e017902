"""Drafts of an answer's next tokens, taken from the answers already given to the same prompt.

Why: answers to one prompt repeat their template from image to image (``<|object_ref_start|>breast
lesion<|object_ref_end|><|seg_mask|>...``, "The thyroid is not present in this breast ultrasound image, so it cannot
be located."), and on the CPU a greedy decode pays a forward per token while a forward of 8-24 tokens costs about
what one or two single-token forwards do. So the batch decoder feeds the chosen token together with a draft of what
followed the same tokens last time, and keeps the longest run the model itself picks at every position
(prompt-lookup decoding): the answer is the greedy answer, computed in fewer forwards.

A continuation is drafted only once two answers in a row agreed on its first token ("trusted"): box coordinates and
sizes change with every image, and a draft that fails at its first token costs a wider forward for one token.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AnswerDrafts"]


class AnswerDrafts:
    """What followed each short run of answer tokens, per prompt: the latest continuation and whether the two latest
    answers agreed on its first token. Memory is bounded: past `max_entries` runs the table starts over."""

    def __init__(self, context: int = 3, longest: int = 23, max_entries: int = 50_000):
        if context < 1 or longest < 1:
            raise ValueError(f"context and longest must be at least 1, got {context} and {longest}")
        self.context, self.longest, self.max_entries = int(context), int(longest), int(max_entries)
        self._table: dict[tuple, tuple[tuple[int, ...], bool]] = {}

    def __len__(self) -> int:
        return len(self._table)

    def learn(self, prompt: Sequence[int], answer: Sequence[int]) -> None:
        """Record every continuation of `answer` (token ids, end token included) to `prompt` (its token ids)."""
        prompt, answer = tuple(prompt), tuple(answer)
        for i in range(1, len(answer)):
            key = (prompt, answer[max(0, i - self.context): i])
            follows = answer[i: i + self.longest]
            old = self._table.get(key)
            if old is None and len(self._table) >= self.max_entries:
                self._table.clear()
            self._table[key] = (follows, old is not None and old[0][:1] == follows[:1])

    def draft(self, prompt: Sequence[int], answer: Sequence[int], room: int) -> list[int]:
        """The trusted continuation of `answer` so far (at most `room` tokens), or [] when there is none."""
        if not answer or room < 1:
            return []
        entry = self._table.get((tuple(prompt), tuple(answer[-self.context:])))
        if entry is None or not entry[1]:
            return []
        return list(entry[0][:room])
