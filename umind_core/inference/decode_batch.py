"""Batched decoding: the rows of one batch (other images, other prompts) answered together on one KV cache.

The Predictor decides what is asked and turns each answer into a Result; this module owns how a batch of rows is
run on the model, because that is where the speed is and where rows can leak into each other:

- A row reads one or more views: a single image is an examination of one view (`prompts.exam_prefix` writes
  both prefixes), so one state type and one encoding path serve both.
- `BatchDecoder.chunks` forms the batches: rows of one layout (their views' sizes) encode together; with the fast
  decoder rows of different layouts and prompts share a batch, without it (the eager reference) only rows of one
  layout and one prompt do.
- `BatchDecoder.encode_rows` runs the image prefix of each distinct row once and, where rows of different
  prefixes share a batch, stacks them into one cache (`fast_decode.StaticKVCache.stack`: right-aligned, the holes
  shifted out of RoPE), so every row answers as it would alone.
- `BatchDecoder.run` feeds the rows' prompts (left-padded; in two parts where that saves positions, see
  `_prompt_split`), decodes greedily (all N mask tokens of a group in one forward), narrows the cache to the live
  rows once most have ended (`BatchDecoder._narrowed`) and hands each row on the moment it ends, then crops the
  cache back to the image prefix for the next prompt.

Only the model's public parts are used (`UMindVL`: processor, tokenizer, `rope_index`, `image_spans`,
`image_states`, its forward) and `fast_decode`'s decoder and cache.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace

import torch

from .. import prompts
from ..imageio import Frame
from . import fast_decode
from .answer_drafts import AnswerDrafts

__all__ = ["PROMPT_PART_POSITIONS", "BatchDecoder", "Decoded", "ImageState", "Row", "layout"]

# What one more forward costs, in prompt positions. On the demo model a prompt forward cost 0.8-1.8 ms beside
# about 0.05 ms a position (1 row: 2.6 ms for 17 tokens, 4.8 for 62; 8 rows: 8.2 ms for 17, 27.7 for 62).
PROMPT_PART_POSITIONS = 32
PREFIX_IDS_KEPT = 256  # (prefix texts, image grids) whose token ids are kept (one per row layout)


def _model_busy(method):
    """`method` run as the model thread's work (FastDecoder.in_use): background step builds wait until it ends."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self.fast is None:
            return method(self, *args, **kwargs)
        with self.fast.in_use():
            return method(self, *args, **kwargs)

    return wrapper


@dataclass
class Row:
    """What one row of a batch asks: the task, the user's words and the built user text (with its warnings)."""

    task: str
    prompt: str | None
    user_text: str
    warnings: list[str]
    suffix_ids: list[int]  # the tokens of the turn after the image prefix: what this row feeds
    readout: str | None = None  # what the Predictor reads off the asked-for mask: "boxes", "landmarks" or an
    # axis (a `calipers.AXES` key)


@dataclass
class ImageState:
    """What encoding keeps: the cache after each row's image prefix and the mask decoder's image features. Row b
    reads the views `views[b]` (one for a single image, several for an examination, in the order the model read
    them); decoding treats every row alike, only the Predictor reads the views (each answer's objects name
    theirs)."""

    views: list[tuple[Frame, ...]]
    cache: object
    prefix_len: int  # the slot after the image prefix (the longest one when rows were stacked)
    rope_delta: torch.Tensor  # (B, 1): M-RoPE position of slot 0 for the text after the image, per row
    image_states: list[list[torch.Tensor]]  # per row, per view (H, W, D)
    encode_s: float

    @property
    def batch(self) -> int:
        return len(self.views)

    def row_views(self, b: int) -> tuple[list[Frame], list[torch.Tensor]]:
        """(frames, image features) the answer of row b reads: its own views."""
        return list(self.views[b]), list(self.image_states[b])


def layout(views: tuple[Frame, ...]) -> tuple[tuple[int, int], ...]:
    """A row's layout: its views' sizes, in order. Rows of one layout have one prefix length and one image grid,
    so they encode as one batch without padding."""
    return tuple(f.size for f in views)


@dataclass
class Decoded:
    """Greedy decoding output of one sequence."""

    token_ids: list[int] = field(default_factory=list)
    token_probs: list[float] = field(default_factory=list)  # probability of each chosen token (1.0 when forced)
    forced: list[bool] = field(default_factory=list)  # True for the N-1 mask tokens appended without choosing
    mask_queries: list[torch.Tensor] = field(default_factory=list)  # one (N, D) per mask group
    truncated: bool = False
    draft_tokens: int = 0  # draft tokens fed with this sequence's chosen ones (BatchDecoder._speculate)
    draft_tokens_kept: int = 0  # of those, the ones the model picked itself


class BatchDecoder:
    """Encodes image prefixes and decodes batches of rows on them for one model; holds no image between calls.

    `fast` is the model's `fast_decode.FastDecoder`, or None for transformers' own forward (the reference).
    """

    def __init__(self, model, fast, max_new_tokens: int, one_forward_masks: bool, batch_size: int):
        self.model = model
        self.fast = fast
        self.max_new_tokens = int(max_new_tokens)
        self.one_forward_masks = bool(one_forward_masks)
        self.batch_size = int(batch_size)
        tok = model.tokenizer
        self.eos_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
        self.pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        self._prefix_ids: dict[tuple, dict] = {}  # (prefix texts, image grids) -> the processor's token ids
        # what this decoder's earlier answers said next, per prompt (_speculate); None: never speculate
        self.drafts: AnswerDrafts | None = AnswerDrafts()

    # ------------------------------------------------------------------ batches and image prefixes
    def stacks(self) -> bool:
        """Whether rows of different prefixes and prompts can share a batch (the fast decoder's stacked cache)."""
        return self.fast is not None and not self.model.training

    def chunks(self, ready: list) -> list[list]:
        """Batches of at most `batch_size` (index, views, Row) items: rows of one layout together (they encode as
        one batch); without stacking, only items with one layout and one user text share a batch."""
        stacks = self.stacks()
        groups: dict[tuple, list] = {}
        for item in ready:
            _, views, row = item
            groups.setdefault((layout(views),) if stacks else (layout(views), row.user_text), []).append(item)
        runs = [[item for group in groups.values() for item in group]] if stacks else list(groups.values())
        chunks = [run[s: s + self.batch_size] for run in runs for s in range(0, len(run), self.batch_size)]
        # each batch's rows longest prompt first (see _feed_prompts); which jobs share a batch stays as it was
        return [sorted(chunk, key=lambda item: -len(item[2].suffix_ids)) for chunk in chunks]

    def encode_rows(self, rows: list[tuple[Frame, ...]]) -> ImageState:
        """The state whose row i reads rows[i]: each distinct row (one views tuple object) encoded once, rows of
        one layout together, and rows of different prefixes stacked into one cache (right-aligned, the holes
        shifted out of RoPE)."""
        distinct: dict[int, tuple[Frame, ...]] = {}
        for views in rows:
            distinct.setdefault(id(views), views)
        if not self.stacks() or (len(distinct) == len(rows) and len({layout(r) for r in rows}) == 1):
            return self.encode(rows)
        by_layout: dict[tuple, list[tuple[Frame, ...]]] = {}
        for views in distinct.values():
            by_layout.setdefault(layout(views), []).append(views)
        where: dict[int, tuple[ImageState, int]] = {}
        for group in by_layout.values():
            state = self.encode(group)
            for r, views in enumerate(group):
                where[id(views)] = (state, r)
        placed = [where[id(views)] for views in rows]
        cache = self.fast.stack([(st.cache, r) for st, r in placed], self.answer_room())
        length = cache.get_seq_length()
        delta = torch.cat([st.rope_delta[r: r + 1] - (length - st.prefix_len) for st, r in placed])
        states = {id(st): st for st, _ in placed}
        return ImageState(
            views=list(rows),
            cache=cache,
            prefix_len=length,
            rope_delta=delta,
            image_states=[st.image_states[r] for st, r in placed],
            encode_s=sum(st.encode_s for st in states.values()),
        )

    def answer_room(self) -> int:
        """Cache slots an answer may need after its prompt: the longest answer and one mask group."""
        return self.max_new_tokens + self.model.num_mask_tokens

    def encode(self, rows: list[tuple[Frame, ...]]) -> ImageState:
        """Run the vision encoder and the LLM over the image prefix of rows of one layout, as one batch: each row's
        views in one sequence (`prompts.exam_prefix`: several views each labelled ``View k:``, the layout the exam
        conversations train on; one view is the plain image prefix). Views of a row may differ in size: each is
        encoded at its own resolution (one `image_grid_thw` row per view)."""
        rows = [tuple(views) for views in rows]
        if len({layout(views) for views in rows}) != 1:
            raise ValueError(f"encode takes rows of one layout, got {sorted({layout(v) for v in rows})}")
        return self._encode_prefix(rows)

    @_model_busy
    def _encode_prefix(self, rows: list[tuple[Frame, ...]]) -> ImageState:
        """Each row's prefix text (its image placeholders filled by its views in order) through the model with the
        cache kept; the image states of every view of every row."""
        model = self.model
        t0 = time.perf_counter()
        texts = [prompts.exam_prefix(len(views)) for views in rows]
        frames = [frame for views in rows for frame in views]
        enc = _to_device(self._processed(frames, texts), model.device, model.dtype)
        position_ids, delta = model.rope_index(enc["input_ids"], enc["mm_token_type_ids"], enc["image_grid_thw"])
        if self.fast is not None and not model.training:  # the lean layers, straight into the decoder's cache
            with torch.no_grad():
                image_embeds, deepstack = model.encode_images(enc["pixel_values"], enc["image_grid_thw"])
                embeds, visual = model.prefix_embeddings(enc["input_ids"], image_embeds)
            # room for a prompt, the answer and a mask group; grows if a prompt needs more
            cache, hidden = self.fast.encode_prefix(embeds, position_ids, visual, deepstack, self.answer_room())
        else:
            with torch.no_grad():
                out = model(
                    input_ids=enc["input_ids"],
                    pixel_values=enc["pixel_values"],
                    image_grid_thw=enc["image_grid_thw"],
                    mm_token_type_ids=enc["mm_token_type_ids"],
                    position_ids=position_ids,
                    use_cache=True,
                    decode_masks=False,
                    logits="none",  # the prefix's own next token is never read: its prompt comes after it
                )
            cache, hidden = out.cache, out.hidden_states
            if self.fast is not None:  # a model in training mode keeps transformers' cache (FastDecoder.adopt)
                cache = self.fast.adopt(cache, answer_tokens=self.answer_room())
        spans = model.image_spans(enc["input_ids"], enc["image_grid_thw"])
        return ImageState(
            views=rows,
            cache=cache,
            prefix_len=int(enc["input_ids"].shape[1]),
            rope_delta=delta.to(model.device),
            image_states=[[model.image_states(hidden[b], span) for span in spans[b]] for b in range(len(rows))],
            encode_s=time.perf_counter() - t0,
        )

    def _processed(self, frames: list[Frame], texts: list[str]) -> dict:
        """The processor's output for these frames and prefix texts.

        Why not the processor alone: the token ids depend only on the texts and the images' grids, and tokenizing
        the prefix was half of the processor's 2 ms a frame on the demo model. So the ids of each (texts, grids)
        are kept after the first call, and later frames run the image processor alone."""
        pixels = [f.pixels for f in frames]
        images = self.model.processor.image_processor(images=pixels, return_tensors="pt")
        key = (tuple(texts), tuple(tuple(g) for g in images["image_grid_thw"].tolist()))
        ids = self._prefix_ids.get(key)
        if ids is not None:
            return {**images, **ids}
        enc = self.model.processor(images=pixels, text=texts, return_tensors="pt")
        if len(self._prefix_ids) >= PREFIX_IDS_KEPT:
            self._prefix_ids.clear()
        self._prefix_ids[key] = {k: v for k, v in enc.items() if k not in images}
        return enc

    # ------------------------------------------------------------------ prompts and decoding
    def forward(self, state: ImageState, ids: torch.Tensor, start: int, delta: torch.Tensor | None = None,
                pad: torch.Tensor | None = None):
        """Feed `ids` (B, k) at cache slots start..start+k-1, slot s of row b at text position s + delta[b]
        (default: the state's); `pad` (B, k) marks left padding of a shorter prompt (stacked caches only)."""
        k = ids.shape[1]
        delta = state.rope_delta if delta is None else delta
        pos = torch.arange(start, start + k, device=ids.device)[None, :] + delta
        if isinstance(state.cache, fast_decode.StaticKVCache):
            return self.fast.forward(state.cache, ids, pos, start, pad)
        if pad is not None:
            raise RuntimeError("prompts of different lengths in one batch need the fast decoder's cache")
        position_ids = pos[None].expand(3, -1, -1)
        with torch.no_grad():
            return self.model(
                input_ids=ids, position_ids=position_ids, cache=state.cache, use_cache=True, decode_masks=False,
                logits="last",  # the next token is chosen from the last position alone (run, _decode)
            )

    @_model_busy
    def run(self, state: ImageState, suffixes: list[list[int]], on_done) -> dict[str, int]:
        """Answer row b's prompt tokens (`suffixes[b]`) on row b of `state`; the cache goes back to the image
        prefix afterwards. Returns the batch's token counts.

        `on_done(b, decoded, prompt_s, decode_s)` is called the moment row b's answer ends, not when the batch's
        longest answer does: a caller whose segment is done need not wait for another's report. prompt_s is the
        batch's prompt feed, decode_s the decoding up to then.
        """
        model = self.model
        t0 = time.perf_counter()
        ids, pad, shift = self._prompt_ids(suffixes, model.device, self._graph_widths(state))
        delta = state.rope_delta - shift[:, None]  # a row's left padding is a hole, not part of its sequence
        t1 = t0

        def finish(b: int, dec: Decoded) -> None:
            on_done(b, dec, t1 - t0, time.perf_counter() - t1)

        try:
            out = self._feed_prompts(state, ids, delta, pad)
            t1 = time.perf_counter()
            decoded, fed = self._decode(state, out.logits[:, -1], state.prefix_len + ids.shape[1], delta, finish,
                                        suffixes)
        finally:
            extra = state.cache.get_seq_length() - state.prefix_len
            if extra > 0:  # back to the image prefix for the next prompt
                state.cache.crop(-extra)
        for prompt, dec in zip(suffixes, decoded):
            if self.drafts is not None:
                self.drafts.learn(prompt, dec.token_ids)
        return {
            "prefix_tokens": state.prefix_len,
            "prompt_tokens": int(ids.shape[1]),
            "generated_tokens": max(len(d.token_ids) for d in decoded),
            "processed_tokens": int(ids.shape[1]) + fed,
            "draft_tokens": sum(d.draft_tokens for d in decoded),
            "draft_tokens_kept": sum(d.draft_tokens_kept for d in decoded),
        }

    def _graph_widths(self, state: ImageState) -> bool:
        """Whether prompts on `state` are fed at a step graph's width (fast_decode.FastDecoder.prompt_width): on the
        fast decoder's cache where multi-token graphs run (`fast_decode.graph_tokens`: one row, in the modes that build
        graphs; a batch keeps its prompt split instead)."""
        return (isinstance(state.cache, fast_decode.StaticKVCache) and self.fast.compile
                and fast_decode.graph_tokens(fast_decode.GRAPH_TOKEN_STEP, state.cache.rows))

    def _prompt_ids(self, per_row: list[list[int]], device,
                    graph_widths: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(ids (B, k), pad mask or None, left padding per row) of each row's turn suffix, left-padded to one k
        (with `graph_widths`, the step graph's width for the longest)."""
        width = max(len(ids) for ids in per_row)
        if graph_widths:
            width = self.fast.prompt_width(width)
        shift = torch.tensor([width - len(ids) for ids in per_row], device=device)
        ids = torch.tensor([[self.pad_id] * (width - len(r)) + r for r in per_row], device=device)
        if not bool(shift.any()):
            return ids, None, shift
        pad = torch.arange(width, device=device)[None, :] < shift[:, None]
        return ids, pad, shift

    def _feed_prompts(self, state: ImageState, ids: torch.Tensor, delta: torch.Tensor, pad: torch.Tensor | None):
        """Feed the rows' prompts (left-padded to one width) after the image prefix; the forward of the last part.

        Why in two parts where it pays: padding costs what real tokens do, and prompts differ in length (62 tokens
        with clicks, 17-32 without: in a batch of 8 mixed requests 270 of 496 positions were real). Rows come
        longest first (`chunks`), so the first part feeds only the leading rows' first columns, through a view
        of their cache rows, and the second part every row from there (`_prompt_split` picks the column).
        """
        start = state.prefix_len
        split = None if self._graph_widths(state) else _prompt_split(pad, state.cache, state.batch)
        if split is None:
            return self.forward(state, ids, start, delta, pad)
        n, p = split
        state.cache.ensure(start + ids.shape[1])
        state.cache.mark(start, pad)  # every row's holes, the columns of the first part included
        self.forward(replace(state, cache=state.cache.leading(n)), ids[:n, :p], start, delta[:n], pad[:n, :p])
        return self.forward(state, ids[:, p:], start + p, delta, pad[:, p:])

    def _decode(self, state: ImageState, logits: torch.Tensor, start: int,
                delta: torch.Tensor | None = None, on_done=None,
                prompts_fed: list[list[int]] | None = None) -> tuple[list[Decoded], int]:
        """Greedy decoding on the cache; returns per-sequence output and the number of positions fed.
        `on_done(b, decoded)` is called as sequence b ends, before the others go on.

        `lanes[r]` is the sequence that row r of the cache (and of `logits`) decodes: all of them at first, then,
        once enough have finished, only the live ones on a smaller cache (`_narrowed`). A lone sequence whose
        prompt (`prompts_fed[b]`) has a trusted draft feeds it with its next token in one forward (`_speculate`).
        """
        model = self.model
        batch = state.batch
        decoded = [Decoded() for _ in range(batch)]
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
            draft = self._draft(state, lanes, pending, decoded, prompts_fed, cursor)
            if draft:
                spec = _Speculation(lanes[0], draft, decoded, pending, groups, done, lanes, on_done)
                kept = self._speculate(state, spec, cursor, delta)
                cursor += kept
                fed += kept
                continue
            k = min(len(pending[b]) for b in lanes if not done[b])
            if not self.one_forward_masks:
                k = 1
            rows = [pending[b][:k] if not done[b] else [self.pad_id] * k for b in lanes]
            out = self.forward(state, torch.tensor(rows, device=model.device), cursor, delta)
            cursor += k
            fed += k
            for r, b in enumerate(lanes):
                if done[b]:
                    continue
                self._collect_masks(groups[b], decoded[b], out.hidden_states[r], pending[b][:k])
                pending[b] = pending[b][k:]
            logits = out.logits[:, -1]
        return decoded, fed

    def _draft(self, state: ImageState, lanes: list[int], pending, decoded, prompts_fed, cursor: int) -> list[int]:
        """The draft to feed after a lone sequence's next token (`AnswerDrafts`), or [] where none is fed: more than
        one row, a mask group being fed, the eager reference, tokens fed one at a time, or no room in the cache
        (a draft never grows it: a new capacity would mean new step graphs)."""
        if (self.drafts is None or prompts_fed is None or len(lanes) != 1 or len(pending[lanes[0]]) != 1
                or not self.one_forward_masks or not isinstance(state.cache, fast_decode.StaticKVCache)
                or state.cache.rows != 1):
            return []
        b = lanes[0]
        room = state.cache.capacity - cursor - 1
        draft = self.drafts.draft(prompts_fed[b], decoded[b].token_ids, room)
        while draft and self._chunk_width(state, 1 + len(draft)) > room + 1:
            draft = draft[:-1]
        return draft

    def _chunk_width(self, state: ImageState, n: int) -> int:
        """The width a forward of n tokens is fed at: a step graph's (right-padded) where graphs run, else n."""
        return self.fast.prompt_width(n) if self._graph_widths(state) else n

    def _speculate(self, state: ImageState, spec: _Speculation, cursor: int, delta) -> int:
        """Feed a lone sequence's next token and its draft in one forward, right-padded to a graph width; keep the
        longest run the model picks itself at every position (choosing from each position's logits exactly as a
        step would), and drop the rest. Returns the tokens kept (fed); the cache ends after them.

        The padding and the dropped tokens are written past the kept ones, where no later token looks (a token
        attends to the slots up to its own) and the next forward overwrites them."""
        b, lanes = spec.lane, spec.lanes
        chunk = spec.pending[b] + spec.draft
        ids = chunk + [self.pad_id] * (self._chunk_width(state, len(chunk)) - len(chunk))
        out = self.forward(state, torch.tensor([ids], device=self.model.device), cursor, delta)
        logits = self.fast.logits(out.hidden_states[:, : len(chunk)])  # the padding's are never read
        used = 0
        while True:
            want = spec.pending[b]
            got = chunk[used: used + len(want)]
            if not got or got != want[: len(got)]:
                break  # the model's choice left the draft: it is fed by the next forward
            self._collect_masks(spec.groups[b], spec.decoded[b], out.hidden_states[0, used: used + len(got)], got)
            used += len(got)
            spec.pending[b] = want[len(got):]
            if spec.pending[b]:
                break  # the draft ended inside a mask group: its other tokens come next
            for e in self._choose(spec.decoded, spec.pending, spec.done, lanes, logits[:, used - 1]):
                if spec.on_done is not None:
                    spec.on_done(e, spec.decoded[e])
            if spec.done[b]:
                break
        state.cache.crop(cursor + used)
        spec.decoded[b].draft_tokens += len(spec.draft)
        spec.decoded[b].draft_tokens_kept += used - 1
        return used

    def _collect_masks(self, group: list[torch.Tensor], decoded: Decoded, states: torch.Tensor,
                       tokens: list[int]) -> None:
        """Keep the states of a sequence's fed mask tokens (`states[j]` is tokens[j]'s) in its open `group`; each
        complete group of N becomes one set of mask queries."""
        for state, tok in zip(states, tokens):
            if tok == self.model.seg_mask_id:
                group.append(state)
                if len(group) == self.model.num_mask_tokens:
                    decoded.mask_queries.append(torch.stack(group))
                    group.clear()

    def _choose(self, decoded: list[Decoded], pending: list[list[int]], done: list[bool], lanes: list[int],
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
            if tok in self.eos_ids:
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

    def _narrowed(self, state: ImageState, delta, lanes: list[int], done: list[bool]):
        """(state, delta, lanes) to decode the next step with: the same, or, once the live sequences fit half the
        cache's rows (see `FastDecoder.narrowed`), a copy holding only them.

        Why: a batch decodes until its longest answer (a 77-token diagnosis beside 20-token segments), and a
        step of 8 rows costs 2-3.5 times one of 1. The caller's state keeps its own cache.
        """
        if not isinstance(state.cache, fast_decode.StaticKVCache):
            return state, delta, lanes
        delta = state.rope_delta if delta is None else delta
        live = [r for r, b in enumerate(lanes) if not done[b]]
        cache = self.fast.narrowed(state.cache, live)
        if cache is None:
            return state, delta, lanes
        return replace(state, cache=cache), delta[live], [lanes[r] for r in live]


@dataclass
class _Speculation:
    """One speculative forward's sequence (`lane`), its draft, and the decode loop's per-sequence lists it updates."""

    lane: int
    draft: list[int]
    decoded: list[Decoded]
    pending: list[list[int]]
    groups: list[list[torch.Tensor]]
    done: list[bool]
    lanes: list[int]
    on_done: object


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


def _to_device(enc, device, dtype) -> dict:
    """The processor's output on the model's device; floating tensors (the pixels) in the model's dtype."""
    out = {}
    for key, value in dict(enc).items():
        if torch.is_tensor(value):
            value = value.to(device, dtype) if value.is_floating_point() else value.to(device)
        out[key] = value
    return out
