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
  `umind_core.inference.scheduler`) as batches through the same loop. With the fast decoder, rows of different image
  prefixes and prompt lengths share one cache with per-row holes (`fast_decode.StaticKVCache.stack`, prompts
  left-padded), so every row answers as it would alone; the eager path batches only rows of one frame size and
  one prompt. Sequences that finish early are fed padding that nobody reads.
- Everything after the image prefix is text, fed by `fast_decode` on a preallocated cache without
  transformers' per-step overhead (`decode="static"`, optionally a compiled step: `"compiled"`, or one with frozen
  weights and autotuned products: `"tuned"`, or `"auto"`, the server's and `umind infer`'s default
  (`fast_decode.serving_mode`): tuned graphs built by a background thread while the steps that would wait for
  them run the static step); `decode="eager"` is transformers' own forward,
  the reference the fast path is tested against.

- `set_exam` + `predict_exam` do the same for an examination (up to four views of one patient read together):
  one prefix with every view labelled ``View k:`` (`prompts.exam_prefix`, the layout the exam conversations train
  on) encoded once, then any number of prompts worded by `prompts.EXAM_TEMPLATES`. The answer's ``View k:``
  markers say which view each object is in; its box, points, line and mask are converted to that view's pixels,
  and its mask decodes against that view's image states, at that view's size. A `Job` whose image is a list of
  views is the same examination read in `predict_many`, so a server batches examinations with single images.

- `readout="mask"` (the default): a detection, a lesion caliper ("breast lesion long axis"), a kidney's or fetal
  head's landmarks or length (BPD, OFD) or a head circumference asks the model to segment the target, and its boxes,
  caliper, points or ellipse are read off that mask by the rules the truth is drawn with (`masks.drawn_objects`,
  `calipers.mask_axes`, `landmarks.ORGANS` and `landmarks.MEASURES`); `"tokens"` keeps the coordinates the model
  writes. Per Predictor, or per call (`Job.readout`).

What lives where: this module checks the inputs (frames, visual prompts), builds each row's prompt and turns each
decoded answer into a Result (objects, masks, confidence); `decode_batch.BatchDecoder` forms the batches,
encodes and stacks the image prefixes, feeds the prompts and decodes, narrowing the cache as rows end;
`readout` says which prompts are read off a mask and draws their boxes, points and lines from it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .. import prompts
from ..answers import grounding
from ..answers.results import GroundedObject, Result
from ..imageio import Frame, window_uint8
from . import fast_decode
from .decode_batch import BatchDecoder, Decoded, ImageState, Row
from .readout import mask_reading, read_off_masks

__all__ = ["READOUTS", "Job", "Predictor", "PredictorError", "checked_readout"]

MIN_SIDE, MAX_SIDE = 8, 16384
#: where boxes and lesion calipers ("breast lesion long axis") come from: "mask" reads them off the mask the model
#: segments for the target (`masks.drawn_objects`, `calipers.mask_axes`: the rules the truth is drawn by);
#: "tokens" takes the coordinates the model writes
READOUTS = ("mask", "tokens")


class PredictorError(ValueError):
    """A bad image, visual prompt or call order; the message names the input and the problem."""


class VisualPromptError(PredictorError, prompts.PromptError):
    """A visual prompt `prompts.VisualPrompt` refused: both a Predictor error and a prompt error for callers."""


@dataclass(frozen=True)
class Job:
    """One prompt on one image or one examination: the unit `Predictor.predict_many` batches with others.

    `image` is a Frame or an array, or a list or tuple of them: an examination's views in reading order, answered
    as `predict_exam` answers them (one prefix holding every view, each object naming its view)."""

    image: Frame | np.ndarray | Sequence[Frame | np.ndarray]
    task: str
    prompt: str | None = None
    box: Sequence[float] | None = None
    points: Sequence[Sequence[float]] | None = None
    labels: Sequence[int] | None = None
    readout: str | None = None  # one of READOUTS for this job alone; None: the Predictor's own


class Predictor:
    """One model's prompts answered on frames: `set_image` + `predict`, or batches (`predict_batch`,
    `predict_many`). Thread-safe: one call runs at a time."""

    def __init__(
        self,
        model,
        max_new_tokens: int = 256,
        mask_threshold: float = 0.0,
        one_forward_masks: bool = True,
        batch_size: int = 8,
        decode: str | None = None,
        compile_cache=None,
        readout: str = "mask",
    ):
        if max_new_tokens < 1:
            raise PredictorError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if batch_size < 1:
            raise PredictorError(f"batch_size must be at least 1, got {batch_size}")
        self.model = model
        self.readout = checked_readout(readout)
        self.mask_threshold = float(mask_threshold)
        self._state: ImageState | None = None
        self._exam: ImageState | None = None
        self._lock = threading.RLock()
        self.last_stats: dict[str, int] = {}
        try:
            fast, self._eager_reason = fast_decode.for_predictor(model, decode, compile_cache=compile_cache)
        except ValueError as exc:
            raise PredictorError(str(exc)) from None
        self._engine = BatchDecoder(model, fast, max_new_tokens, one_forward_masks, batch_size)

    # The decoding settings are the batch decoder's (one owner); read here as before.
    @property
    def max_new_tokens(self) -> int:
        return self._engine.max_new_tokens

    @property
    def one_forward_masks(self) -> bool:
        return self._engine.one_forward_masks

    @property
    def batch_size(self) -> int:
        return self._engine.batch_size

    def decode_status(self) -> dict:
        """Which decode is live (fast_decode.FastDecoder.status; {"mode": "eager", "steps": []} for transformers'
        forward, with "why" when another mode was asked for or is the default). Takes no Predictor lock, so /info
        answers while a batch decodes."""
        fast = self._engine.fast
        if fast is not None:
            return fast.status()
        return {"mode": "eager", "steps": [], **({"why": self._eager_reason} if self._eager_reason else {})}

    # ------------------------------------------------------------------ image
    @property
    def is_image_set(self) -> bool:
        return self._state is not None

    def set_image(self, image: Frame | np.ndarray) -> None:
        """Encode one frame and keep its cache; later `predict` calls reuse it."""
        frame = _as_frame(image)
        with self._lock:
            self._state = None
            self._state = self._engine.encode([(frame,)])
            self.last_stats = {"prefix_tokens": self._state.prefix_len}

    def reset_image(self) -> None:
        with self._lock:
            self._state = None

    def get_image_embedding(self) -> torch.Tensor:
        """The image features of the frame given to `set_image` (H, W, D: the states the mask decoder reads), as
        Segment Anything's predictor hands out its embedding: for pick rules and studies that compare images in the
        model's own terms without reaching into the cache."""
        with self._lock:
            if self._state is None:
                raise PredictorError("no image set: call set_image(frame) before get_image_embedding()")
            return self._state.image_states[0][0].detach()

    # ------------------------------------------------------------------ examination
    @property
    def is_exam_set(self) -> bool:
        return self._exam is not None

    def set_exam(self, views: Sequence[Frame | np.ndarray]) -> None:
        """Encode an examination's views (1 to `manifest.MAX_EXAM_VIEWS`, in reading order) as one prefix and
        keep its cache; later `predict_exam` calls reuse it. Independent of `set_image`: either may be set."""
        frames = _as_exam(views)
        with self._lock:
            self._exam = None
            self._exam = self._engine.encode([tuple(frames)])
            self.last_stats = {"prefix_tokens": self._exam.prefix_len}

    def reset_exam(self) -> None:
        with self._lock:
            self._exam = None

    def predict_exam(self, task: str, prompt: str | None = None,
                     views: Sequence[Frame | np.ndarray] | None = None, readout: str | None = None) -> Result:
        """Answer one prompt about the whole examination given to `set_exam` (or `views`, set first).

        Tasks: segment, detect, keypoints, measure, diagnose, report, ask (`prompts.EXAM_TEMPLATES`); no box or
        clicks (no exam conversation is trained with them). The Result's objects carry ``view`` (0-based, the
        index into the views) and coordinates, masks and millimetres of that view; ``views`` describes each.
        `readout`: as `predict`'s, for this call alone.
        """
        with self._lock:
            if views is not None:
                self.set_exam(views)
            if self._exam is None:
                raise PredictorError("no examination set: call set_exam(views) before predict_exam()")
            return self._run(self._exam, [self._row(task, prompt, None, None, None, self._exam.views[0], readout)])[0]

    # ------------------------------------------------------------------ prompts
    def predict(
        self,
        task: str,
        prompt: str | None = None,
        box: Sequence[float] | None = None,
        points: Sequence[Sequence[float]] | None = None,
        labels: Sequence[int] | None = None,
        readout: str | None = None,
    ) -> Result:
        """Answer one prompt on the image given to `set_image`. Coordinates are pixels of that image; `readout`
        overrides the Predictor's own for this call."""
        with self._lock:
            if self._state is None:
                raise PredictorError("no image set: call set_image(frame) before predict()")
            row = self._row(task, prompt, box, points, labels, self._state.views[0], readout)
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
        readout: str | None = None,
    ) -> list[Result]:
        """The same prompt on many frames, in batches of `batch_size` (frames of one size encode together); results
        come back in input order. A frame or visual prompt the Predictor refuses fails the whole call before any
        work. The image set by `set_image` is left as it was.
        """
        ready, failed = self._prepare([Job(f, task, prompt, box, points, labels, readout) for f in frames])
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
        A job on an examination (`Job.image` a list of views) is answered as `predict_exam` answers it.

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
    def _prepare(self, jobs: Sequence[Job]) -> tuple[list[tuple[int, tuple[Frame, ...], Row]],
                                                     dict[int, PredictorError]]:
        """(index, views, row) of every job the Predictor accepts (views: the job's Frames, one for a single image),
        and the error of each one it refuses. Jobs on one image object share one views tuple, so that it is
        encoded once."""
        ready, failed, images = [], {}, {}
        for i, job in enumerate(jobs):
            try:
                views = images.get(id(job.image))
                if views is None:
                    views = images[id(job.image)] = _as_views(job.image)
                ready.append((i, views, self._row(job.task, job.prompt, job.box, job.points, job.labels, views,
                                                  job.readout)))
            except PredictorError as exc:
                failed[i] = exc
            except prompts.PromptError as exc:  # e.g. an unknown task: still both error types for callers
                failed[i] = VisualPromptError(str(exc))
        return ready, failed

    def _answer(self, ready: list[tuple[int, tuple[Frame, ...], Row]], on_chunk=None,
                on_answer=None) -> list[Result]:
        """Results of prepared jobs, in their order; `on_answer(i, result)` as each is ready (i: the job's index).
        Rows share batches as `BatchDecoder.chunks` forms them, examinations and single images alike."""
        order = {i: k for k, (i, _, _) in enumerate(ready)}
        results: list[Result | None] = [None] * len(ready)
        with self._lock:
            for chunk in self._engine.chunks(ready):
                def on_row(b: int, res: Result, chunk=chunk) -> None:
                    i = chunk[b][0]
                    results[order[i]] = res
                    if on_answer is not None:
                        on_answer(i, res)

                state = self._engine.encode_rows([views for _, views, _ in chunk])
                self._run(state, [row for _, _, row in chunk], on_row)
                if on_chunk is not None:
                    on_chunk(len(chunk))
        return results  # type: ignore[return-value]

    def _row(self, task, prompt, box, points, labels, frames: Sequence[Frame], readout: str | None = None) -> Row:
        """The user text about one row's views (one image, or an examination's views: `prompts.user_text`); the
        visual prompt is checked and placed on the first by `prompts.VisualPrompt`. With `readout="mask"` a
        detection, a lesion caliper or an organ's landmarks asks the model to segment the target
        (`readout.read_off_masks`), in every view."""
        width, height = frames[0].size
        try:
            vp = prompts.VisualPrompt.of(box, points, labels)
            grid_box, grid_points, warnings = vp.on_frame(width, height, frames[0].source)
            readout = self._mask_readout(task, prompt, readout)
            ask_task, ask_prompt = (task, prompt) if readout is None else ("segment", readout[0])
            user_text = prompts.user_text(ask_task, ask_prompt, len(frames), box=grid_box, points=grid_points,
                                          labels=None if vp.labels is None else list(vp.labels))
        except prompts.PromptError as exc:
            raise VisualPromptError(str(exc)) from None
        suffix_ids = self.model.tokenizer(prompts.turn_suffix(user_text), add_special_tokens=False)["input_ids"]
        return Row(task, prompt, user_text, list(warnings), suffix_ids,
                   readout=None if readout is None else readout[1])

    def _mask_readout(self, task, prompt, readout: str | None = None) -> tuple[str | None, str] | None:
        """`readout.mask_reading` of this prompt when it is to be read off a mask (`readout`, else the Predictor's),
        else None (the model's own tokens answer)."""
        if (self.readout if readout is None else checked_readout(readout)) != "mask":
            return None
        return mask_reading(task, prompt)

    def _run(self, state: ImageState, rows: list[Row], on_row=None) -> list[Result]:
        """Answer row b's prompt on row b of `state` (the batch decoder's work); build each row's Result the moment
        its answer ends (`on_row(b, result)` then), so a caller whose segment is done need not wait for another's
        report."""
        batch = state.batch
        results: list[Result | None] = [None] * batch

        def finish(b: int, dec: Decoded, prompt_s: float, decode_s: float) -> None:
            frames, features = state.row_views(b)
            res = self._result(frames, features, dec, rows[b].task, rows[b].prompt, list(rows[b].warnings))
            if rows[b].readout is not None:
                read_off_masks(res, rows[b], frames)
            res.timings.update(encode_s=state.encode_s / batch, prompt_s=prompt_s / batch, decode_s=decode_s / batch)
            results[b] = res
            if on_row is not None:
                on_row(b, res)

        self.last_stats = self._engine.run(state, [row.suffix_ids for row in rows], finish)
        return results  # type: ignore[return-value]

    def _result(self, frames: list[Frame], features: list[torch.Tensor], dec: Decoded, task, prompt,
                warnings) -> Result:
        """A row's answer on its views' `frames` and image `features` (`ImageState.row_views`). A single image is
        read as an examination of one view whose objects carry no view; an examination's objects sit in the view
        their ``View k:`` marker names, in that view's pixels, each mask decoded against its own view's image
        features."""
        exam = len(frames) > 1
        ids, text, parsed, garbled = self._read(dec, warnings)
        views = _span_views(parsed.objects, len(frames), warnings) if exam else [0] * len(parsed.objects)
        t0 = time.perf_counter()
        groups = _view_groups(parsed.objects, views, len(dec.mask_queries)) if exam \
            else {0: list(range(len(dec.mask_queries)))}
        masks, mask_scores, mask_entropy = ({}, {}, None) if garbled is not None \
            else self._view_masks(features, frames, dec, groups)
        mask_s = time.perf_counter() - t0
        offsets = _char_offsets(self.model.tokenizer, ids)
        objects: list[GroundedObject] = []
        for span, v in zip(parsed.objects, views):
            if v is None:
                continue
            width, height = frames[v].size
            token_score = _span_score(span.char_span, offsets, dec.token_probs)
            objects += _span_objects(span, width, height, masks, mask_scores, token_score, view=v if exam else None)
        where = {"source": None, "image_size": None,
                 "views": [{"source": f.source, "frame_index": f.index, "image_size": list(f.size)} for f in frames]} \
            if exam else {"source": frames[0].source, "image_size": tuple(frames[0].size)}
        result = Result(task=task, prompt=prompt or "", text=text, answer=parsed.answer, objects=objects,
                        warnings=warnings, timings={"mask_s": mask_s}, frame_index=frames[0].index,
                        confidence=_confidence(dec, mask_entropy), unparsable=garbled is not None, **where)
        if exam:
            result.attach_views(frames)
        else:
            result.attach_geometry(frames[0])
        return result

    def _read(self, dec: Decoded, warnings: list[str]):
        """(answer token ids, text, parse, why it is garbled or None) of one decoded answer; warnings added."""
        ids = [t for t in dec.token_ids if t not in self._engine.eos_ids]
        text = self.model.tokenizer.decode(ids, skip_special_tokens=False)
        parsed = grounding.parse(text)
        warnings.extend(parsed.warnings)
        if dec.truncated:
            warnings.append(f"answer stopped at max_new_tokens={self.max_new_tokens}")
        garbled = grounding.degenerate(parsed)
        if garbled is not None:  # token soup is not a result: no objects, no masks, no answer to show
            warnings.append(f"unparsable answer: {garbled}; it is not a result and nothing is written for it")
            parsed = grounding.ParseResult([], "", parsed.warnings, 0)
        return ids, text, parsed, garbled

    def _view_masks(self, features: list[torch.Tensor], frames: list[Frame], dec: Decoded,
                    groups: dict[int, list[int]]):
        """({group index: mask}, {group index: score}, entropy): the mask groups of each view decoded against that
        view's image features and at its size, one decoder call per view; the entropy is per pixel over all."""
        masks, scores, parts = {}, {}, []
        for v, gs in sorted(groups.items()):
            if not gs:
                continue
            width, height = frames[v].size
            view_masks, view_scores, entropy = self._masks(features[v], [dec.mask_queries[g] for g in gs],
                                                           (height, width))
            masks.update(zip(gs, view_masks))
            scores.update(zip(gs, view_scores))
            parts.append((entropy, len(gs) * width * height))
        if len(parts) == 1:
            return masks, scores, parts[0][0]
        pixels = sum(n for _, n in parts)
        return masks, scores, (sum(e * n for e, n in parts) / pixels if pixels else None)

    def _masks(self, features: torch.Tensor, queries: list[torch.Tensor], size: tuple[int, int]):
        with torch.no_grad():
            logits = self.model.decode_masks([torch.stack(queries)], [features], [size])[0].float()
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
def checked_readout(readout: str) -> str:
    """`readout` if it is one of READOUTS (the Predictor, and the server before it reads an image), else the error."""
    if readout not in READOUTS:
        raise PredictorError(f"readout must be one of {', '.join(READOUTS)}, got {readout!r}")
    return readout


def _span_objects(span, width: int, height: int, masks: dict, mask_scores: dict, token_score: float | None,
                  view: int | None = None) -> list[GroundedObject]:
    """The GroundedObjects of one parsed span in pixels of a width x height image: one per box, line or mask (the
    points go with the first); `masks` and `mask_scores` by mask group index."""
    boxes = [grounding.box_from_grid(bx, width, height) for bx in span.boxes]
    lines = [grounding.line_from_grid(ln, width, height) for ln in span.lines]
    points = [grounding.point_from_grid(p, width, height) for p in span.points]
    span_masks = [m.index for m in span.masks if m.index in masks]
    n = max(len(boxes), len(lines), len(span_masks), 1 if points else 0)
    objects = []
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
            view=view,
        ))
    return objects


def _span_views(spans, n_views: int, warnings: list[str]) -> list[int | None]:
    """The 0-based view of each parsed object of an examination's answer (the parser's 1-based ``view``), or None
    where it names a view the examination does not have (left out, with a warning). An object before any marker
    is placed in the first view, with a warning when there are several (the trained answer marks every object)."""
    out: list[int | None] = []
    for span in spans:
        if span.view is None:
            if n_views > 1:
                warnings.append(f"object {span.label!r} has no 'View k:' marker; it is placed in view 1")
            out.append(0)
        elif span.view > n_views:
            warnings.append(f"object {span.label!r} is marked View {span.view}, but the examination has "
                            f"{n_views} view(s); it is left out")
            out.append(None)
        else:
            out.append(span.view - 1)
    return out


def _view_groups(spans, views: list[int | None], n_groups: int) -> dict[int, list[int]]:
    """{view: the mask groups of the objects placed in it}, groups the decoder produced only."""
    out: dict[int, list[int]] = {}
    for span, v in zip(spans, views):
        if v is not None:
            out.setdefault(v, []).extend(m.index for m in span.masks if m.index < n_groups)
    return out


def _as_views(image) -> tuple[Frame, ...]:
    """A job's image as the views its row reads, checked: a list or tuple is an examination's views, anything else
    one image (an examination of one view)."""
    if isinstance(image, (list, tuple)):
        return tuple(_as_exam(image))
    return (_as_frame(image),)


def _as_exam(views) -> list[Frame]:
    """An examination's views as checked Frames; an error names the view and the problem."""
    from ..data.manifest import MAX_EXAM_VIEWS

    if isinstance(views, (Frame, np.ndarray)) or not isinstance(views, Iterable) or isinstance(views, (str, bytes)):
        raise PredictorError(f"an examination is a list of views (Frames or arrays), got {type(views).__name__}; "
                             "for one image use set_image")
    views = list(views)
    if not views:
        raise PredictorError("an examination needs at least one view, got an empty list")
    if len(views) > MAX_EXAM_VIEWS:
        raise PredictorError(f"an examination holds at most {MAX_EXAM_VIEWS} views (manifest.MAX_EXAM_VIEWS), "
                             f"got {len(views)}")
    frames = []
    for k, view in enumerate(views, start=1):
        try:
            frames.append(_as_frame(view))
        except PredictorError as exc:
            raise PredictorError(f"view {k} of the examination: {exc}") from None
    return frames


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
        pixels = window_uint8(pixels, source)
    pixels = np.ascontiguousarray(pixels)
    if frame is not None:
        return Frame(pixels=pixels, spacing=frame.spacing, index=frame.index, source=frame.source,
                     scan_mask=frame.scan_mask)
    return Frame(pixels=pixels, spacing=None, index=0, source=source)


def _confidence(dec: Decoded, mask_entropy: float | None) -> dict[str, float]:
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
