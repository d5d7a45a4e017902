"""The Predictor: set an image once, then answer many prompts on it cheaply (as Segment Anything's SamPredictor).

Every caller (the CLI, the MONAI Label tasks, the evaluation) goes through this one code path; the task is data
(a row of `prompts.TEMPLATES`), never a subclass.

How the work is split:
- `set_image` runs the vision encoder and the LLM over the image prefix (`<|im_start|>user\\n<|vision_start|>
  <image tokens><|vision_end|>`) once and keeps the KV cache plus the last-layer states at the image tokens
  (the mask decoder's image features).
- `predict` feeds only the prompt tokens on that cache, decodes greedily, and crops the cache back to the prefix
  afterwards, so the next prompt starts from the same image state.
- When the model emits `<|seg_mask|>`, all N mask tokens are fed in one forward on the cache (not decoded one by
  one); their states are the decoder's kernel queries, and the decoder turns them into a mask at the frame's
  full resolution.
- `predict_batch` runs many frames with one prompt (a cine clip, the slices of a volume) and `predict_many` runs
  jobs that share nothing (another image, another task, other clicks: concurrent requests gathered by
  `umind_core.scheduler`) as batches through the same loop. With the fast decoder, rows of different image
  prefixes and prompt lengths share one cache with per-row holes (`fast_decode.StaticKVCache.stack`, prompts
  left-padded), so every row answers as it would alone; the eager path batches only rows of one frame size and
  one prompt. Sequences that finish early are fed padding that nobody reads.
- Everything after the image prefix is text, fed by `modeling.fast_decode` on a preallocated cache without
  transformers' per-step overhead (`decode="static"`, optionally a compiled step: `"compiled"`, or one with frozen
  weights and autotuned products: `"tuned"`); `decode="eager"` is transformers' own forward, the reference the
  fast path is tested against.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from . import grounding, prompts
from .imageio import Frame
from .modeling import fast_decode
from .results import GroundedObject, Result

__all__ = ["Job", "Predictor", "PredictorError"]

MIN_SIDE, MAX_SIDE = 8, 16384


class PredictorError(ValueError):
    """A bad image, visual prompt or call order; the message names the input and the problem."""


class VisualPromptError(PredictorError, prompts.PromptError):
    """A visual prompt `prompts.VisualPrompt` refused: both a Predictor error and a prompt error for callers."""


@dataclass(frozen=True)
class Job:
    """One prompt on one frame: the unit `Predictor.predict_many` batches with others."""

    frame: Frame | np.ndarray
    task: str
    prompt: str | None = None
    box: Sequence[float] | None = None
    points: Sequence[Sequence[float]] | None = None
    labels: Sequence[int] | None = None


@dataclass
class _Row:
    """What one row of a batch asks: the task, the user's words and the built user text (with its warnings)."""

    task: str
    prompt: str | None
    user_text: str
    warnings: list[str]
    suffix_ids: list[int]  # the tokens of the turn after the image prefix: what this row feeds


@dataclass
class _ImageState:
    """What `set_image` keeps: the cache after the image prefix and the decoder's image features."""

    frames: list[Frame]
    cache: object
    prefix_len: int  # the slot after the image prefix (the longest one when rows were stacked)
    rope_delta: torch.Tensor  # (B, 1): M-RoPE position of slot 0 for the text after the image, per row
    image_states: list[torch.Tensor]  # per frame (H, W, D)
    encode_s: float

    @property
    def batch(self) -> int:
        return len(self.frames)


@dataclass
class _Decoded:
    """Greedy decoding output of one sequence."""

    token_ids: list[int] = field(default_factory=list)
    token_probs: list[float] = field(default_factory=list)  # probability of each chosen token (1.0 when forced)
    forced: list[bool] = field(default_factory=list)  # True for the N-1 mask tokens appended without choosing
    mask_queries: list[torch.Tensor] = field(default_factory=list)  # one (N, D) per mask group
    truncated: bool = False


class Predictor:
    def __init__(
        self,
        model,
        max_new_tokens: int = 256,
        mask_threshold: float = 0.0,
        one_forward_masks: bool = True,
        batch_size: int = 8,
        decode: str | None = None,
    ):
        if max_new_tokens < 1:
            raise PredictorError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if batch_size < 1:
            raise PredictorError(f"batch_size must be at least 1, got {batch_size}")
        self.model = model
        self.max_new_tokens = int(max_new_tokens)
        self.mask_threshold = float(mask_threshold)
        self.one_forward_masks = bool(one_forward_masks)
        self.batch_size = int(batch_size)
        tok = model.tokenizer
        self._eos_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
        self._pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        self._state: _ImageState | None = None
        self._lock = threading.RLock()
        self.last_stats: dict[str, int] = {}
        try:
            self._fast = fast_decode.for_predictor(model, decode)
        except ValueError as exc:
            raise PredictorError(str(exc)) from None

    # ------------------------------------------------------------------ image
    @property
    def is_image_set(self) -> bool:
        return self._state is not None

    def set_image(self, image: Frame | np.ndarray) -> None:
        """Encode one frame and keep its cache; later `predict` calls reuse it."""
        frame = _as_frame(image)
        with self._lock:
            self._state = None
            self._state = self._encode([frame])
            self.last_stats = {"prefix_tokens": self._state.prefix_len}

    def reset_image(self) -> None:
        with self._lock:
            self._state = None

    # ------------------------------------------------------------------ prompts
    def predict(
        self,
        task: str,
        prompt: str | None = None,
        box: Sequence[float] | None = None,
        points: Sequence[Sequence[float]] | None = None,
        labels: Sequence[int] | None = None,
    ) -> Result:
        """Answer one prompt on the image given to `set_image`. Coordinates are pixels of that image."""
        with self._lock:
            if self._state is None:
                raise PredictorError("no image set: call set_image(frame) before predict()")
            row = self._row(task, prompt, box, points, labels, self._state.frames[0])
            return self._run(self._state, [row])[0]

    def predict_batch(
        self,
        frames: Iterable[Frame | np.ndarray],
        task: str,
        prompt: str | None = None,
        box: Sequence[float] | None = None,
        points: Sequence[Sequence[float]] | None = None,
        labels: Sequence[int] | None = None,
        progress: bool = False,
    ) -> list[Result]:
        """The same prompt on many frames, in batches of `batch_size` (frames of one size encode together); results
        come back in input order. A frame or visual prompt the Predictor refuses fails the whole call before any
        work. The image set by `set_image` is left as it was.
        """
        ready, failed = self._prepare([Job(f, task, prompt, box, points, labels) for f in frames])
        if failed:  # one prompt for every frame: a refusal is the whole call's, before any work
            raise failed[min(failed)]
        bar = None
        if progress and ready:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(ready), desc=f"umind {task}", unit="frame")
        try:
            return self._answer(ready, on_chunk=None if bar is None else bar.update)  # type: ignore[return-value]
        finally:
            if bar is not None:
                bar.close()

    def predict_many(self, jobs: Sequence[Job], on_chunk=None, on_answer=None) -> list[Result | PredictorError]:
        """Answer unrelated jobs in batches; each gets its Result, or the PredictorError that refused its input.

        A bad frame or visual prompt fails only its own job. The image set by `set_image` is left as it was.
        `on_chunk(n)` is called after each batch of n jobs (a progress bar's update). `on_answer(i, answer)` is
        called with job i's answer the moment it is ready, from this call's thread: a short answer in a batch is
        handed on while the batch's longer ones still decode (the scheduler replies to its caller then).
        """
        ready, failed = self._prepare(jobs)
        answers: list[Result | PredictorError | None] = [None] * len(jobs)

        def deliver(i: int, answer: Result | PredictorError) -> None:
            answers[i] = answer
            if on_answer is not None:
                on_answer(i, answer)

        for i, exc in sorted(failed.items()):
            deliver(i, exc)
        self._answer(ready, on_chunk, deliver)
        return answers  # type: ignore[return-value]

    # ------------------------------------------------------------------ internals
    def _prepare(self, jobs: Sequence[Job]) -> tuple[list[tuple[int, Frame, _Row]], dict[int, PredictorError]]:
        """(index, frame, row) of every job the Predictor accepts, and the error of each one it refuses.
        Jobs on one image object share one Frame, so that the image is encoded once."""
        ready, failed, frames = [], {}, {}
        for i, job in enumerate(jobs):
            try:
                frame = frames.get(id(job.frame))
                if frame is None:
                    frame = frames[id(job.frame)] = _as_frame(job.frame)
                ready.append((i, frame, self._row(job.task, job.prompt, job.box, job.points, job.labels, frame)))
            except PredictorError as exc:
                failed[i] = exc
            except prompts.PromptError as exc:  # e.g. an unknown task: still both error types for callers
                failed[i] = VisualPromptError(str(exc))
        return ready, failed

    def _answer(self, ready: list[tuple[int, Frame, _Row]], on_chunk=None, on_answer=None) -> list[Result]:
        """Results of prepared jobs, in their order; `on_answer(i, result)` as each is ready (i: the job's index)."""
        order = {i: k for k, (i, _, _) in enumerate(ready)}
        results: list[Result | None] = [None] * len(ready)
        with self._lock:
            for chunk in self._chunks(ready):
                def on_row(b: int, res: Result, chunk=chunk) -> None:
                    i = chunk[b][0]
                    results[order[i]] = res
                    if on_answer is not None:
                        on_answer(i, res)

                state = self._encode_rows([frame for _, frame, _ in chunk])
                self._run(state, [row for _, _, row in chunk], on_row)
                if on_chunk is not None:
                    on_chunk(len(chunk))
        return results  # type: ignore[return-value]

    def _row(self, task, prompt, box, points, labels, frame: Frame) -> _Row:
        """The user text for one frame; the visual prompt is checked and placed by `prompts.VisualPrompt`."""
        width, height = frame.size
        try:
            vp = prompts.VisualPrompt.of(box, points, labels)
            grid_box, grid_points, warnings = vp.on_frame(width, height, frame.source)
        except prompts.PromptError as exc:
            raise VisualPromptError(str(exc)) from None
        user_text = prompts.build_user_text(
            task, prompt, box=grid_box, points=grid_points, labels=None if vp.labels is None else list(vp.labels)
        )
        suffix_ids = self.model.tokenizer(prompts.turn_suffix(user_text), add_special_tokens=False)["input_ids"]
        return _Row(task, prompt, user_text, list(warnings), suffix_ids)

    def _stacks(self) -> bool:
        """Whether rows of different prefixes and prompts can share a batch (the fast decoder's stacked cache)."""
        return self._fast is not None and not self.model.training

    def _chunks(self, ready: list) -> list[list]:
        """Batches of at most `batch_size` jobs: same-size frames together (they encode as one batch); without
        stacking, only jobs with one frame size and one user text share a batch."""
        stacks = self._stacks()
        groups: dict[tuple, list] = {}
        for item in ready:
            _, frame, row = item
            groups.setdefault((frame.size,) if stacks else (frame.size, row.user_text), []).append(item)
        runs = [[item for group in groups.values() for item in group]] if stacks else list(groups.values())
        chunks = [run[s: s + self.batch_size] for run in runs for s in range(0, len(run), self.batch_size)]
        # each batch's rows longest prompt first (see _feed_prompts); which jobs share a batch stays as it was
        return [sorted(chunk, key=lambda item: -len(item[2].suffix_ids)) for chunk in chunks]

    def _encode_rows(self, frames: list[Frame]) -> _ImageState:
        """The state whose row i is frames[i]: each distinct frame encoded once, frames of one size together, and
        rows of different prefixes stacked into one cache (right-aligned, the holes shifted out of RoPE)."""
        distinct: dict[int, Frame] = {}
        for frame in frames:
            distinct.setdefault(id(frame), frame)
        if not self._stacks() or (len(distinct) == len(frames) and len({f.size for f in frames}) == 1):
            return self._encode(frames)
        by_size: dict[tuple[int, int], list[Frame]] = {}
        for frame in distinct.values():
            by_size.setdefault(frame.size, []).append(frame)
        where: dict[int, tuple[_ImageState, int]] = {}
        for group in by_size.values():
            state = self._encode(group)
            for r, frame in enumerate(group):
                where[id(frame)] = (state, r)
        rows = [where[id(f)] for f in frames]
        cache = self._fast.stack([(st.cache, r) for st, r in rows], self._answer_room())
        length = cache.get_seq_length()
        delta = torch.cat([st.rope_delta[r: r + 1] - (length - st.prefix_len) for st, r in rows])
        states = {id(st): st for st, _ in rows}
        return _ImageState(
            frames=list(frames),
            cache=cache,
            prefix_len=length,
            rope_delta=delta,
            image_states=[st.image_states[r] for st, r in rows],
            encode_s=sum(st.encode_s for st in states.values()),
        )

    def _answer_room(self) -> int:
        return self.max_new_tokens + self.model.num_mask_tokens

    def _encode(self, frames: list[Frame]) -> _ImageState:
        model = self.model
        t0 = time.perf_counter()
        enc = model.processor(
            images=[f.pixels for f in frames], text=[prompts.IMAGE_PREFIX] * len(frames), return_tensors="pt"
        )
        enc = _to_device(enc, model.device, model.dtype)
        position_ids, delta = model.qwen.model.get_rope_index(
            enc["input_ids"], enc["mm_token_type_ids"], image_grid_thw=enc["image_grid_thw"]
        )
        with torch.no_grad():
            out = model(
                input_ids=enc["input_ids"],
                pixel_values=enc["pixel_values"],
                image_grid_thw=enc["image_grid_thw"],
                mm_token_type_ids=enc["mm_token_type_ids"],
                position_ids=position_ids,
                use_cache=True,
                decode_masks=False,
            )
        spans = model.image_spans(enc["input_ids"], enc["image_grid_thw"])
        image_states = [model.image_states(out.hidden_states[b], spans[b][0]) for b in range(len(frames))]
        cache = out.cache
        if self._fast is not None:  # room for a prompt, the answer and a mask group; grows if a prompt needs more
            cache = self._fast.adopt(cache, answer_tokens=self._answer_room())
        return _ImageState(
            frames=frames,
            cache=cache,
            prefix_len=int(enc["input_ids"].shape[1]),
            rope_delta=delta.to(model.device),
            image_states=image_states,
            encode_s=time.perf_counter() - t0,
        )

    def _forward(self, state: _ImageState, ids: torch.Tensor, start: int, delta: torch.Tensor | None = None,
                 pad: torch.Tensor | None = None):
        """Feed `ids` (B, k) at cache slots start..start+k-1, slot s of row b at text position s + delta[b]
        (default: the state's); `pad` (B, k) marks left padding of a shorter prompt (stacked caches only)."""
        k = ids.shape[1]
        delta = state.rope_delta if delta is None else delta
        pos = torch.arange(start, start + k, device=ids.device)[None, :] + delta
        if isinstance(state.cache, fast_decode.StaticKVCache):
            return self._fast.forward(state.cache, ids, pos, start, pad)
        if pad is not None:
            raise RuntimeError("prompts of different lengths in one batch need the fast decoder's cache")
        position_ids = pos[None].expand(3, -1, -1)
        with torch.no_grad():
            return self.model(
                input_ids=ids, position_ids=position_ids, cache=state.cache, use_cache=True, decode_masks=False
            )

    def _run(self, state: _ImageState, rows: list[_Row], on_row=None) -> list[Result]:
        """Answer row b's prompt on row b of `state`; the cache goes back to the image prefix afterwards.

        Each row's Result is built the moment its answer ends (`on_row(b, result)` then), not when the batch's
        longest answer does: a caller whose segment is done need not wait for another's report.
        """
        model = self.model
        t0 = time.perf_counter()
        ids, pad, shift = self._prompt_ids(rows, model.device)
        delta = state.rope_delta - shift[:, None]  # a row's left padding is a hole, not part of its sequence
        batch = state.batch
        results: list[Result | None] = [None] * batch
        t1 = t0

        def finish(b: int, dec: _Decoded) -> None:
            decode_s = time.perf_counter() - t1
            res = self._result(state, b, dec, rows[b].task, rows[b].prompt, list(rows[b].warnings))
            res.timings.update(encode_s=state.encode_s / batch, prompt_s=(t1 - t0) / batch, decode_s=decode_s / batch)
            results[b] = res
            if on_row is not None:
                on_row(b, res)

        try:
            out = self._feed_prompts(state, ids, delta, pad)
            t1 = time.perf_counter()
            decoded, fed = self._decode(state, out.logits[:, -1], state.prefix_len + ids.shape[1], delta, finish)
        finally:
            extra = state.cache.get_seq_length() - state.prefix_len
            if extra > 0:  # back to the image prefix for the next prompt
                state.cache.crop(-extra)
        self.last_stats = {
            "prefix_tokens": state.prefix_len,
            "prompt_tokens": int(ids.shape[1]),
            "generated_tokens": max(len(d.token_ids) for d in decoded),
            "processed_tokens": int(ids.shape[1]) + fed,
        }
        return results  # type: ignore[return-value]

    def _prompt_ids(self, rows: list[_Row], device) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(ids (B, k), pad mask or None, left padding per row) of each row's turn suffix, left-padded to one k."""
        per_row = [row.suffix_ids for row in rows]
        width = max(len(ids) for ids in per_row)
        shift = torch.tensor([width - len(ids) for ids in per_row], device=device)
        ids = torch.tensor([[self._pad_id] * (width - len(r)) + r for r in per_row], device=device)
        if not bool(shift.any()):
            return ids, None, shift
        pad = torch.arange(width, device=device)[None, :] < shift[:, None]
        return ids, pad, shift

    def _feed_prompts(self, state: _ImageState, ids: torch.Tensor, delta: torch.Tensor, pad: torch.Tensor | None):
        """Feed the rows' prompts (left-padded to one width) after the image prefix; the forward of the last part.

        Why in two parts where it pays: padding costs what real tokens do, and prompts differ in length (62 tokens
        with clicks, 17-32 without: in a batch of 8 mixed requests 270 of 496 positions were real). Rows come
        longest first (`_chunks`), so the first part feeds only the leading rows' first columns, through a view
        of their cache rows, and the second part every row from there (`_prompt_split` picks the column).
        """
        start = state.prefix_len
        split = _prompt_split(pad, state.cache, state.batch)
        if split is None:
            return self._forward(state, ids, start, delta, pad)
        n, p = split
        state.cache.ensure(start + ids.shape[1])
        state.cache.mark(start, pad)  # every row's holes, the columns of the first part included
        self._forward(replace(state, cache=state.cache.leading(n)), ids[:n, :p], start, delta[:n], pad[:n, :p])
        return self._forward(state, ids[:, p:], start + p, delta, pad[:, p:])

    def _decode(self, state: _ImageState, logits: torch.Tensor, start: int,
                delta: torch.Tensor | None = None, on_done=None) -> tuple[list[_Decoded], int]:
        """Greedy decoding on the cache; returns per-sequence output and the number of positions fed.
        `on_done(b, decoded)` is called as sequence b ends, before the others go on.

        `lanes[r]` is the sequence that row r of the cache (and of `logits`) decodes: all of them at first, then,
        once enough have finished, only the live ones on a smaller cache (`_narrowed`).
        """
        model = self.model
        n_mask, seg_id = model.num_mask_tokens, model.seg_mask_id
        batch = state.batch
        decoded = [_Decoded() for _ in range(batch)]
        pending: list[list[int]] = [[] for _ in range(batch)]  # tokens chosen but not yet fed
        groups: list[list[torch.Tensor]] = [[] for _ in range(batch)]  # states of the mask group being fed
        done = [False] * batch
        lanes = list(range(batch))
        cursor, fed = start, 0
        while True:
            for b in self._choose(decoded, pending, done, lanes, logits):
                if on_done is not None:
                    on_done(b, decoded[b])
            if all(done):
                break
            state, delta, lanes = self._narrowed(state, delta, lanes, done)
            k = min(len(pending[b]) for b in lanes if not done[b])
            if not self.one_forward_masks:
                k = 1
            rows = [pending[b][:k] if not done[b] else [self._pad_id] * k for b in lanes]
            out = self._forward(state, torch.tensor(rows, device=model.device), cursor, delta)
            cursor += k
            fed += k
            for r, b in enumerate(lanes):
                if done[b]:
                    continue
                for j, tok in enumerate(pending[b][:k]):
                    if tok == seg_id:
                        groups[b].append(out.hidden_states[r, j])
                        if len(groups[b]) == n_mask:
                            decoded[b].mask_queries.append(torch.stack(groups[b]))
                            groups[b] = []
                pending[b] = pending[b][k:]
            logits = out.logits[:, -1]
        return decoded, fed

    def _choose(self, decoded: list[_Decoded], pending: list[list[int]], done: list[bool], lanes: list[int],
                logits: torch.Tensor) -> list[int]:
        """Pick the next token of every sequence that has nothing left to feed, all rows in one softmax: set what
        to feed next (`pending`), or mark it done. A mask token forces the other N-1 of its group. Returns the
        sequences that ended here."""
        rows, ended = [], []
        for r, b in enumerate(lanes):
            if done[b] or pending[b]:
                continue
            if len(decoded[b].token_ids) >= self.max_new_tokens:
                decoded[b].truncated, done[b] = True, True
                ended.append(b)
            else:
                rows.append(r)
        if not rows:
            return ended
        probs = torch.softmax(logits[rows].float(), dim=-1)
        tokens = torch.argmax(probs, dim=-1)
        chosen = probs.gather(1, tokens[:, None])[:, 0]
        seg_id, extra = self.model.seg_mask_id, self.model.num_mask_tokens - 1
        for r, tok, prob in zip(rows, tokens.tolist(), chosen.tolist()):
            dec, b = decoded[lanes[r]], lanes[r]
            dec.token_ids.append(tok)
            dec.token_probs.append(prob)
            dec.forced.append(False)
            if tok in self._eos_ids:
                done[b] = True
                ended.append(b)
            elif tok != seg_id:
                pending[b] = [tok]
            else:
                dec.token_ids.extend([seg_id] * extra)
                dec.token_probs.extend([1.0] * extra)
                dec.forced.extend([True] * extra)
                pending[b] = [seg_id] * (extra + 1)
        return ended

    def _narrowed(self, state: _ImageState, delta, lanes: list[int], done: list[bool]):
        """(state, delta, lanes) to decode the next step with: the same, or, once the live sequences fit half the
        cache's rows (see `FastDecoder.narrowed`), a copy holding only them.

        Why: a batch decodes until its longest answer (a 77-token diagnosis beside 20-token segments), and a
        step of 8 rows costs 2-3.5 times one of 1. The caller's state keeps its own cache.
        """
        if not isinstance(state.cache, fast_decode.StaticKVCache):
            return state, delta, lanes
        delta = state.rope_delta if delta is None else delta
        live = [r for r, b in enumerate(lanes) if not done[b]]
        cache = self._fast.narrowed(state.cache, live)
        if cache is None:
            return state, delta, lanes
        return replace(state, cache=cache), delta[live], [lanes[r] for r in live]

    def _result(self, state: _ImageState, b: int, dec: _Decoded, task, prompt, warnings) -> Result:
        model, frame = self.model, state.frames[b]
        width, height = frame.size
        ids = [t for t in dec.token_ids if t not in self._eos_ids]
        text = model.tokenizer.decode(ids, skip_special_tokens=False)
        parsed = grounding.parse(text)
        warnings.extend(parsed.warnings)
        if dec.truncated:
            warnings.append(f"answer stopped at max_new_tokens={self.max_new_tokens}")
        garbled = grounding.degenerate(parsed)
        if garbled is not None:  # token soup is not a result: no objects, no masks, no answer to show
            warnings.append(f"unparsable answer: {garbled}; it is not a result and nothing is written for it")
            parsed = grounding.ParseResult([], "", parsed.warnings, 0)
        t0 = time.perf_counter()
        masks, mask_scores, mask_entropy = self._masks(state, b, dec, (height, width)) if garbled is None \
            else ([], [], None)
        mask_s = time.perf_counter() - t0
        offsets = _char_offsets(model.tokenizer, ids)
        objects: list[GroundedObject] = []
        for span in parsed.objects:
            token_score = _span_score(span.char_span, offsets, dec.token_probs)
            boxes = [grounding.box_from_grid(bx, width, height) for bx in span.boxes]
            lines = [grounding.line_from_grid(ln, width, height) for ln in span.lines]
            points = [grounding.point_from_grid(p, width, height) for p in span.points]
            span_masks = [m.index for m in span.masks if m.index < len(masks)]
            n = max(len(boxes), len(lines), len(span_masks), 1 if points else 0)
            for i in range(n):
                mask = masks[span_masks[i]] if i < len(span_masks) else None
                score = mask_scores[span_masks[i]] if mask is not None else token_score
                objects.append(GroundedObject(
                    label=span.label,
                    box=boxes[i] if i < len(boxes) else None,
                    points=points if i == 0 else [],
                    line=lines[i] if i < len(lines) else None,
                    mask=mask,
                    score=score,
                ))
        result = Result(
            task=task,
            prompt=prompt or "",
            text=text,
            answer=parsed.answer,
            objects=objects,
            warnings=warnings,
            timings={"mask_s": mask_s},
            frame_index=frame.index,
            source=frame.source,
            image_size=(width, height),
            confidence=_confidence(dec, mask_entropy),
            unparsable=garbled is not None,
        )
        result.attach_geometry(frame)
        return result

    def _masks(self, state: _ImageState, b: int, dec: _Decoded, size: tuple[int, int]):
        if not dec.mask_queries:
            return [], [], None
        with torch.no_grad():
            logits = self.model.decode_masks(
                [torch.stack(dec.mask_queries)], [state.image_states[b]], [size]
            )[0].float()
        probs = torch.sigmoid(logits)
        masks = (logits > self.mask_threshold).cpu().numpy()
        scores = []
        for m, p in zip(masks, probs):
            inside = p[torch.from_numpy(m).to(p.device)]
            scores.append(float(inside.mean()) if inside.numel() else 0.0)
        p = probs.clamp(1e-6, 1 - 1e-6)
        entropy = float((-(p * p.log2() + (1 - p) * (1 - p).log2())).mean())  # bits per pixel, 0..1
        return list(masks), scores, entropy


# ---------------------------------------------------------------------- helpers
def _as_frame(image: Frame | np.ndarray) -> Frame:
    """Accept the I/O layer's Frame or a plain array (grey, RGB or RGBA); check what the model can see."""
    if isinstance(image, Frame):
        pixels, frame = image.pixels, image
    else:
        pixels = np.asarray(image)
        frame = None
    source = frame.source if frame is not None else "<array>"
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], 3, axis=2)
    if pixels.ndim != 3 or pixels.shape[2] not in (1, 3, 4):
        raise PredictorError(f"{source}: image must be H x W, H x W x 3 or H x W x 4, got shape {pixels.shape}")
    if pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    if pixels.shape[2] == 4:
        pixels = pixels[..., :3]
    h, w = pixels.shape[:2]
    if min(h, w) < MIN_SIDE or max(h, w) > MAX_SIDE:
        raise PredictorError(f"{source}: image of {w}x{h} pixels is outside {MIN_SIDE}..{MAX_SIDE} per side")
    if pixels.dtype != np.uint8:
        if not np.issubdtype(pixels.dtype, np.number) or not np.isfinite(pixels).all():
            raise PredictorError(f"{source}: image has non-finite or non-numeric values ({pixels.dtype})")
        lo, hi = float(pixels.min()), float(pixels.max())
        scale = 255.0 / (hi - lo) if hi > lo else 0.0
        pixels = ((pixels - lo) * scale).astype(np.uint8)
    pixels = np.ascontiguousarray(pixels)
    if frame is not None:
        return Frame(pixels=pixels, spacing=frame.spacing, index=frame.index, source=frame.source,
                     scan_mask=frame.scan_mask)
    return Frame(pixels=pixels, spacing=None, index=0, source=source)


# What one more forward costs, in prompt positions. On the demo model a prompt forward cost 0.8-1.8 ms beside
# about 0.05 ms a position (1 row: 2.6 ms for 17 tokens, 4.8 for 62; 8 rows: 8.2 ms for 17, 27.7 for 62).
PROMPT_PART_POSITIONS = 32


def _prompt_split(pad: torch.Tensor | None, cache, batch: int) -> tuple[int, int] | None:
    """(n, p): feed the first p columns of the first n rows apart, then columns p.. of every row, where that costs
    fewer positions (counting PROMPT_PART_POSITIONS for the extra forward) than one padded forward; else None.
    Only on a static cache whose rows are the batch's (no bucket rows) and whose rows come longest first."""
    if pad is None or not isinstance(cache, fast_decode.StaticKVCache) or cache.rows != batch:
        return None
    shift = pad.sum(dim=1).tolist()  # each row's left padding
    if shift != sorted(shift):
        return None
    rows, width = pad.shape
    best, split = rows * width, None
    for p in sorted(set(shift) - {0}):
        n = sum(s < p for s in shift)
        cost = PROMPT_PART_POSITIONS + n * p + rows * (width - p)
        if cost < best:
            best, split = cost, (n, p)
    return split


def _confidence(dec: _Decoded, mask_entropy: float | None) -> dict[str, float]:
    """Uncertainty signals of one answer: chosen-token probabilities (forced mask tokens excluded) and the
    mean binary entropy of its mask pixels."""
    chosen = [p for p, forced in zip(dec.token_probs, dec.forced) if not forced]
    out = {}
    if chosen:
        out["token_prob_mean"] = float(np.mean(chosen))
        out["token_prob_min"] = float(np.min(chosen))
    if mask_entropy is not None:
        out["mask_entropy"] = mask_entropy
    return out


def _to_device(enc, device, dtype) -> dict:
    out = {}
    for key, value in dict(enc).items():
        if torch.is_tensor(value):
            value = value.to(device, dtype) if value.is_floating_point() else value.to(device)
        out[key] = value
    return out


def _char_offsets(tokenizer, ids: list[int]) -> list[int]:
    """End offset in the decoded text of each token.

    Each token decoded alone (one batched call) gives the offsets whenever the pieces add up to the whole text.
    Where they do not (a multi-byte character split across tokens, a tokenizer that tidies spaces), decoding
    every prefix keeps characters whole; that costs a decode per token of a quadratic length (6 ms of a batch
    of 8 answers here), which is why it is only the fallback.
    """
    if not ids:
        return []
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False)
    if "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False):
        return list(itertools.accumulate(len(piece) for piece in pieces))
    return [len(tokenizer.decode(ids[: i + 1], skip_special_tokens=False)) for i in range(len(ids))]


def _span_score(char_span: tuple[int, int], offsets: list[int], probs: list[float]) -> float | None:
    """Mean probability of the tokens that overlap a span of the text."""
    start, end = char_span
    chosen, prev = [], 0
    for off, p in zip(offsets, probs):
        if off > start and prev < end:
            chosen.append(p)
        prev = off
    return float(np.mean(chosen)) if chosen else None
