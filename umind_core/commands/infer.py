"""Run one task on many images: files, folders or glob patterns, every frame of a cine clip or slice of a volume.

Each input gets <out>/<name>/ with results.json (per-frame answers, the input's geometry, the model and the
request; written last, so its presence marks the input done and a rerun skips it unless --overwrite), a label map
in the input's own geometry and format family (always for segment; zeros when nothing was found),
markups.mrk.json for detect, keypoints and measure or when the answers hold points, lines or boxes (an empty point
list when nothing was found), image.nrrd where the input's calibration is hidden from Slicer (a DICOM calibrated
only in its ultrasound regions: the label map and markups lie in that calibrated geometry), and overlay PNGs with
--overlay. Lengths (answer, results.json, markups) are the drawn lines measured with the calibrated spacing, in px
without one; a head circumference (measure "head circumference") is the perimeter of the fetal head's ellipse, and
its markup a closed curve along that ellipse stating it. An unparsable answer is a warning and writes no label map
or markups (`umind_core.batch`). A bad input fails alone with one line naming it; the others still complete, the
summary lists the failures and the exit status is 1. A bad request (unknown task, empty or over-long prompt,
points without labels) stops before any model is loaded, with status 2.

Under `accelerate launch --multi_gpu --num_processes N -m umind_core.cli infer ...` (or torchrun / mpirun) every
process takes every N-th input and the first one prints the merged summary; the outputs are the same as one
process writes. Processes on the CPU (--device cpu, or no CUDA) join a gloo group; note that accelerate's own
`--cpu` launcher starts a single process unless mpirun is configured, so use --multi_gpu with --device cpu. Put INPUTS before --points/--labels
(or end those lists with --), since those flags take a variable number of values.

With `--exam` every input is one examination (a folder of 2-4 views, or one file's selected frames), read in one
conversation; its outputs are laid out per view (`_infer_exam.py`).

Within a process, `--parallel N` inputs are read, answered and written at once by N threads whose frames meet in
one `BatchScheduler` (umind_core.inference.scheduler): a folder of single-frame images runs in shared batches, and one
input's reading or writing overlaps another's forward pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..atomic import write_text
from ._infer_input import InferError, Outcome, _check_content, _message, _read, already_done

NAME = "infer"
HELP = "run a task on images, cine clips and volumes and write results, label maps and markups"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..prompts import TASKS

    parser.add_argument("inputs", nargs="+", metavar="INPUTS", help="image files, folders or glob patterns")
    parser.add_argument("--out", required=True, help="output folder (one sub-folder per input)")
    parser.add_argument("--model", help="a UMind model folder (default: the bundled demo model)")
    parser.add_argument("--task", required=True, metavar="TASK", help=f"one of: {', '.join(TASKS)}")
    parser.add_argument("--prompt", help="the target ('thyroid nodule'), context, or for ask the question")
    parser.add_argument("--box", nargs=4, type=float, metavar=("X1", "Y1", "X2", "Y2"),
                        help="a region in pixels of each frame")
    parser.add_argument("--points", nargs="+", type=float, metavar="X Y", help="clicks in pixels: X Y [X Y ...]")
    parser.add_argument("--labels", nargs="+", type=int, metavar="L",
                        help="one label per point: 1 positive, 0 negative")
    parser.add_argument("--frames", default="all",
                        help="all (default), current (middle slice / first frame), A-B, A- or A (from 0)")
    parser.add_argument("--axis", type=int, choices=(0, 1, 2),
                        help="slicing axis of volumes, numpy (z, y, x) order (default 0); 2D images and cine "
                             "clips ignore it")
    parser.add_argument("--batch-size", type=int, default=8, help="frames per forward pass (default 8)")
    parser.add_argument("--parallel", type=int, default=4, metavar="N",
                        help="inputs read, answered and written at once; their frames share forward passes "
                             "(umind_core.inference.scheduler; default 4, 1 = one input after the other)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: the process's accelerator or cpu)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--decode",
                        help="auto (default, or UMIND_DECODE: tuned steps built by a background thread while the "
                             "first steps of each batch size run the static step; inductor's caches go to "
                             "~/.cache/umind/compile unless TORCHINDUCTOR_CACHE_DIR is set), static, compiled, "
                             "tuned (frozen weights and autotuned products: fastest per token, 10-40 s to tune each "
                             "batch size at first, waited for), or eager (transformers' forward, the reference)")
    parser.add_argument("--readout", default="mask", choices=["mask", "tokens"],
                        help="boxes (detect) and lesion calipers ('breast lesion long axis') read off the mask the "
                             "model segments for the target (mask, the default) or the coordinates it writes "
                             "(tokens)")
    parser.add_argument("--exam", action="store_true",
                        help="every input is one examination read in one conversation: a folder of its views "
                             "(2-4 images) or one file's selected frames (--frames); tasks: "
                             "segment, detect, keypoints, measure, diagnose, report, ask")
    parser.add_argument("--overwrite", action="store_true", help="redo inputs whose results.json exists")
    parser.add_argument("--overlay", action="store_true", help="also write an overlay PNG per frame")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no per-failure lines")


# ------------------------------------------------------------------ request


@dataclass(frozen=True)
class Request:
    """What is asked of every input; validated once, before any model is loaded."""

    task: str
    prompt: str | None
    box: tuple[float, float, float, float] | None
    points: list[tuple[float, float]] | None
    labels: list[int] | None
    frames: object  # batch.FrameSpec
    axis: int | None
    exam: bool = False  # every input is one examination (_infer_exam.py)

    def to_dict(self) -> dict:
        return {
            "task": self.task, "prompt": self.prompt,
            "box": list(self.box) if self.box is not None else None,
            "points": [list(p) for p in self.points] if self.points is not None else None,
            "labels": list(self.labels) if self.labels is not None else None,
            "frames": str(self.frames), "axis": self.axis, **({"exam": True} if self.exam else {}),
        }


def validate_request(args: argparse.Namespace) -> Request:
    """The request as `umind infer` was asked it, checked by the rules the Predictor and the server apply:
    the prompt by the template table (`prompts.build_user_text`), the box and clicks by `prompts.VisualPrompt`
    (named by their options), the frames by `frames.parse_frames`."""
    from .. import prompts
    from ..batch import parse_frames

    if args.task not in prompts.TASKS:
        raise InferError(f"unknown task {args.task!r}; valid tasks: {', '.join(prompts.TASKS)}")
    prompt = args.prompt
    if prompt is not None and not prompt.strip():
        raise InferError("--prompt is empty; give the target or question, or leave --prompt out")
    points = None
    if args.points is not None:  # the flat X Y X Y of argv; the numbers themselves are VisualPrompt's to judge
        if len(args.points) % 2:
            raise InferError(f"--points needs pairs of numbers X Y [X Y ...], got {len(args.points)} values")
        points = [(args.points[i], args.points[i + 1]) for i in range(0, len(args.points), 2)]
    visual = prompts.VisualPrompt.of(args.box, points, args.labels, names=("--box", "--points", "--labels"))
    if args.batch_size < 1:
        raise InferError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.parallel < 1:
        raise InferError(f"--parallel must be at least 1, got {args.parallel}")
    if args.max_new_tokens < 1:
        raise InferError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    from ..inference.fast_decode import DECODE_MODES

    if args.decode is not None and args.decode not in DECODE_MODES:
        raise InferError(f"--decode must be one of {', '.join(DECODE_MODES)}, got {args.decode!r}")
    exam = bool(args.exam)
    if exam:
        if args.task not in prompts.EXAM_TEMPLATES:
            raise InferError(f"--exam answers {', '.join(prompts.EXAM_TEMPLATES)}, not {args.task!r}")
        if visual.box is not None or visual.points is not None:
            raise InferError("--exam takes no --box or --points (no examination prompt is trained with them)")
        prompts.build_exam_text(args.task, prompt)
    else:
        prompts.build_user_text(args.task, prompt)  # length, special tokens, a question for ask
    return Request(task=args.task, prompt=prompt, box=visual.box,
                   points=None if visual.points is None else list(visual.points),
                   labels=None if visual.labels is None else list(visual.labels),
                   frames=parse_frames(args.frames), axis=args.axis, exam=exam)


# ------------------------------------------------------------------ one input


@dataclass
class _Context:
    request: Request
    predictor: object
    out: Path
    model_name: str
    batch_size: int
    overwrite: bool
    overlay: bool
    bar: object
    say: object
    scheduler: object = None  # a BatchScheduler when several inputs run at once, else None
    bar_lock: object = field(default_factory=threading.Lock)

    def predict(self, frames: list) -> list:
        """One chunk of frames through the Predictor, batched with other inputs' chunks when running in parallel."""
        r = self.request
        if self.scheduler is None:
            return self.predictor.predict_batch(frames, r.task, r.prompt, box=r.box, points=r.points,
                                                labels=r.labels)
        from ..inference.predictor import Job

        return self.scheduler.predict([Job(f, r.task, r.prompt, r.box, r.points, r.labels) for f in frames])

    def predict_exam(self, views: list):
        """One examination's answer (its views read in one conversation): as `predict`, batched with other inputs
        when running in parallel, so the model still runs on its one thread."""
        r = self.request
        if self.scheduler is None:
            return self.predictor.predict_exam(r.task, r.prompt, views)
        from ..inference.predictor import Job

        return self.scheduler.predict([Job(tuple(views), r.task, r.prompt)])[0]

    def grow_bar(self, total: int = 0, done: int = 0, postfix: str | None = None) -> None:
        if self.bar is None:
            return
        with self.bar_lock:
            self.bar.total += total
            if postfix is not None:
                self.bar.set_postfix_str(postfix)
            if done:
                self.bar.update(done)
            self.bar.refresh()


def _process(ctx: _Context, index: int, item) -> Outcome:
    from .. import batch

    name = item.display
    out_dir = ctx.out / item.name
    wanted = ctx.request.to_dict()
    if already_done(ctx, out_dir, wanted):
        return Outcome(index, name, item.name, "skipped")
    t0 = time.perf_counter()
    study = _read(item.path, ctx.request.axis)
    _check_content(study, name)
    indices = ctx.request.frames.select(study.geometry, name)
    frames = [study.frames[i] for i in indices]
    batch.clear_outputs(out_dir)
    ctx.grow_bar(total=len(frames), postfix=item.name[-30:])
    results = []
    try:
        for s in range(0, len(frames), ctx.batch_size):
            chunk = frames[s: s + ctx.batch_size]
            results.extend(ctx.predict(chunk))
            ctx.grow_bar(done=len(chunk))
    except BaseException:
        ctx.grow_bar(total=-(len(frames) - len(results)))  # frames that will not be processed leave the total
        raise
    batch.write_outputs(out_dir, study, frames, results, wanted, ctx.model_name, overlay=ctx.overlay,
                        extra={"elapsed_s": round(time.perf_counter() - t0, 3)})
    return Outcome(index, name, item.name, "done", frames=len(frames))


def _run_one(ctx: _Context, index: int, item) -> Outcome:
    import torch

    try:
        if ctx.request.exam:
            from ._infer_exam import process_exam

            rec = process_exam(ctx, index, item)
        else:
            rec = _process(ctx, index, item)
    except (ValueError, OSError, MemoryError, torch.OutOfMemoryError) as exc:
        rec = Outcome(index, item.display, item.name, "failed", message=_message(exc, item.display))
        ctx.say(f"umind infer: {item.display}: {rec.message}")
    return rec


# ------------------------------------------------------------------ run


_WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _distributed(device: str | None):
    """accelerate's process state when launched as more than one process (accelerate launch, torchrun, mpirun),
    else None. CPU processes (asked for, or no CUDA) join a gloo group; accelerate decides that only when told."""
    if max(int(os.environ.get(k, "1") or 1) for k in _WORLD_SIZE_VARS) <= 1:
        return None
    import torch
    from accelerate import PartialState

    use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
    cpu = use_cpu or (device or "").startswith("cpu") or not torch.cuda.is_available()
    state = PartialState(cpu=cpu)
    return state if state.num_processes > 1 else None


def _model_name(path: str | None) -> str:
    from .. import demo

    if path:
        return str(path)
    return f"demo ({demo.DEMO_MODEL_DIR})" if demo.has_demo_model() else "untrained tiny model (random weights)"


def _summary_lines(records: list[Outcome], elapsed: float) -> list[str]:
    failed = [r for r in records if r.status == "failed"]
    skipped = sum(r.status == "skipped" for r in records)
    frames = sum(r.frames for r in records)
    lines = [f"umind infer: {len(records)} inputs, {frames} frames, {len(failed)} failed, {skipped} skipped, "
             f"in {elapsed:.1f} s"]
    lines += [f"  FAILED {r.input}: {r.message}" for r in failed]
    return lines


def _write_rank_summary(out: Path, rank: int, records: list[Outcome]) -> None:
    write_text(out / f".summary-{rank}.json", json.dumps([asdict(r) for r in records]))


def _read_rank_summaries(out: Path, world: int) -> list[Outcome]:
    records = []
    for rank in range(world):
        path = out / f".summary-{rank}.json"
        try:
            records += [Outcome(**d) for d in json.loads(path.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError) as exc:
            raise InferError(f"process {rank} left no readable summary {path}: {exc}") from exc
        path.unlink()
    return sorted(records, key=lambda r: r.index)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    from .. import batch

    request = validate_request(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InferError(f"--out {out} exists and is not a folder")
    items, problems = _discover(args.inputs, out, request.exam)

    state = _distributed(args.device)
    rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
    is_main = rank == 0
    device = args.device or (str(state.device) if state is not None else _default_device())
    out.mkdir(parents=True, exist_ok=True)

    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    from .. import demo
    from ..inference.fast_decode import serving_mode
    from ..inference.step_builder import default_compile_cache
    from ..inference.predictor import Predictor
    from ..inference.scheduler import BatchScheduler, model_thread

    quiet = args.quiet
    say = (lambda msg: None) if quiet else (lambda msg: tqdm.write(msg, file=sys.stderr))
    mine = list(range(rank, len(items), world))
    wanted = request.to_dict()
    # a rerun where everything is done loads no model; a model that fails to load stops the run (status 2)
    pending = args.overwrite or any(batch.existing_request(out / items[i].name) != wanted for i in mine)
    predictor = None
    # an examination is one row of the scheduler's batches, read and written while other inputs' rows run
    parallel = args.parallel > 1 and len(mine) > 1
    # with parallel inputs the model loads and runs on one thread of its own (see umind_core.inference.scheduler: torch's
    # OpenMP slows a thread that is not the first to run parallel work); alone, it all runs on this thread
    model_executor = model_thread() if parallel and pending else None

    def load():
        model = demo.load_model(args.model, device=device, dtype=args.dtype,
                                warn=lambda msg: tqdm.write(f"umind: warning: {msg}", file=sys.stderr))
        return Predictor(model, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                         decode=serving_mode(args.decode), compile_cache=default_compile_cache(),
                         readout=args.readout)

    if pending:
        predictor = load() if model_executor is None else model_executor.submit(load).result()
    records: list[Outcome] = []
    if is_main:  # specs that named nothing are reported once, by the first process
        records += [Outcome(len(items) + k, spec, None, "failed", message=why)
                    for k, (spec, why) in enumerate(problems)]
        for r in records:
            say(f"umind infer: {r.input}: {r.message}")
    bar = None if quiet or not is_main else tqdm(total=0, desc="umind infer", unit="frame", file=sys.stderr)
    ctx = _Context(request=request, predictor=predictor, out=out, model_name=_model_name(args.model),
                   batch_size=args.batch_size, overwrite=args.overwrite, overlay=args.overlay, bar=bar, say=say)
    try:
        if predictor is not None and parallel:
            # batches what is queued, waits for nothing (no window, no regroup: the server's 30 ms regroup was
            # measured for HTTP clients, not for these workers); every batch runs on the model's thread
            ctx.scheduler = BatchScheduler(predictor, window_ms=0, regroup_ms=0, executor=model_executor)
            with ThreadPoolExecutor(min(args.parallel, len(mine)), thread_name_prefix="umind-infer") as pool:
                records += list(pool.map(lambda i: _run_one(ctx, i, items[i]), mine))
        else:
            for index in mine:
                records.append(_run_one(ctx, index, items[index]))
    finally:
        _release(ctx, model_executor)
    if state is not None:
        _write_rank_summary(out, rank, records)
        state.wait_for_everyone()
        if not is_main:
            return 1 if any(r.status == "failed" for r in records) else 0
        records = _read_rank_summaries(out, world)
    records.sort(key=lambda r: r.index)
    print("\n".join(_summary_lines(records, time.perf_counter() - t0)))
    return 1 if any(r.status == "failed" for r in records) else 0


def _release(ctx: _Context, model_executor) -> None:
    """What a run holds, given back whether it ended well or not: the progress bar, the scheduler's worker thread
    (now, not `idle_s` after the run: one alive while Python exits can abort the process) and the model's thread."""
    if ctx.bar is not None:
        ctx.bar.close()
    if ctx.scheduler is not None:
        ctx.scheduler.close()
    if model_executor is not None:
        model_executor.shutdown()


def _discover(specs, out: Path, exam: bool) -> tuple[list, list[tuple[str, str]]]:
    """The inputs (InputItem, or with --exam ExamItem) and the specs that named none; none at all is an error."""
    from .. import batch

    if exam:
        from ._infer_exam import ExamItem

        exams, problems = batch.discover_exams(specs, exclude=out)
        if not exams:
            raise InferError("no examinations: " + "; ".join(f"{spec}: {why}" for spec, why in problems))
        names = batch.output_names([p for p, _ in exams])
        return [ExamItem(p, files, n) for (p, files), n in zip(exams, names)], problems
    paths, problems = batch.discover_inputs(specs, exclude=out)
    if not paths:
        raise InferError("no input files: " + "; ".join(f"{spec}: {why}" for spec, why in problems))
    return [batch.InputItem(p, n) for p, n in zip(paths, batch.output_names(paths))], problems


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
