"""Cross-request batching: unrelated jobs (other images, sizes, tasks, clicks) in one batch answer exactly as
each does alone, a refused job fails alone, and the scheduler gathers concurrent callers into shared batches."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from conftest import make_image, task_answers
from umind_core.inference.predictor import Job, Predictor, PredictorError
from umind_core.inference.scheduler import BatchScheduler

_SIZES = {0: (256, 256), 1: (192, 256), 2: (256, 224)}  # image seed -> (height, width): three prefix lengths


def _frames():
    return {seed: make_image(seed, height=h, width=w) for seed, (h, w) in _SIZES.items()}


def _mixed_jobs(frames) -> list[Job]:
    """Every task, three frame sizes, a visual prompt, and two jobs on one image object."""
    prompts = {task: prompt for task, (prompt, _) in task_answers().items()}
    jobs = [Job(frames[0], "segment", prompts["segment"]), Job(frames[1], "detect", prompts["detect"]),
            Job(frames[2], "segment", "lesion", points=[[120.0, 100.0], [30.0, 30.0]], labels=[1, 0]),
            Job(frames[0], "diagnose", prompts["diagnose"]), Job(frames[1], "report", prompts["report"]),
            Job(frames[2], "keypoints", prompts["keypoints"]), Job(frames[0], "measure", prompts["measure"]),
            Job(frames[1], "ask", "What organ is shown in this image?"),
            Job(frames[2], "segment", "lesion", box=[40.0, 40.0, 200.0, 180.0])]
    return jobs


def _alone(model, job: Job):
    return Predictor(model, max_new_tokens=64, decode="eager").predict_batch(
        [job.image], job.task, job.prompt, box=job.box, points=job.points, labels=job.labels)[0]


def _assert_same(batched, alone):
    assert batched.text == alone.text
    assert batched.task == alone.task and batched.image_size == alone.image_size
    assert len(batched.objects) == len(alone.objects)
    for a, b in zip(batched.objects, alone.objects):
        assert a.label == b.label and a.box == b.box and a.line == b.line and a.points == b.points
        assert (a.mask is None) == (b.mask is None)
        if a.mask is not None:
            assert a.mask.shape == b.mask.shape
            assert (a.mask != b.mask).mean() < 1e-3  # only pixels at the threshold may flip
            assert a.score == pytest.approx(b.score, abs=1e-5)
    for key, value in alone.confidence.items():
        assert batched.confidence[key] == pytest.approx(value, abs=1e-5)


@pytest.mark.parametrize("batch_size", [3, 9])
def test_mixed_jobs_in_one_batch_answer_as_each_alone(trained_tiny, batch_size):
    frames = _frames()
    jobs = _mixed_jobs(frames)
    batched = Predictor(trained_tiny, max_new_tokens=64, decode="static", batch_size=batch_size).predict_many(jobs)
    texts = set()
    for job, res in zip(jobs, batched):
        assert not isinstance(res, Exception), res
        _assert_same(res, _alone(trained_tiny, job))
        texts.add(res.text)
    assert len(texts) >= 6  # the jobs really asked different things


def test_a_refused_job_fails_alone_and_the_others_answer(trained_tiny):
    frames = _frames()
    good = _mixed_jobs(frames)[:3]
    bad_clicks = Job(frames[0], "segment", "lesion", points=[[10.0, 10.0]], labels=[1, 0])  # 1 point, 2 labels
    unreadable = Job(np.full((64, 64), np.nan, dtype=np.float32), "segment", "lesion")
    out_of_frame = Job(frames[1], "segment", "lesion", box=[300.0, 300.0, 400.0, 400.0])
    jobs = [good[0], bad_clicks, good[1], unreadable, out_of_frame, good[2]]
    answers = Predictor(trained_tiny, max_new_tokens=64, batch_size=8).predict_many(jobs)
    for i in (1, 3, 4):
        assert isinstance(answers[i], PredictorError), answers[i]
    assert "non-finite" in str(answers[3])
    for job, res in zip(good, (answers[0], answers[2], answers[5])):
        _assert_same(res, _alone(trained_tiny, job))


def test_an_examination_job_batches_with_images_and_answers_as_predict_exam(trained_tiny):
    """A Job whose image is a list of views is the examination `predict_exam` reads: in `predict_many` it shares a
    stacked batch with single images (each row still answers as alone) and gives predict_exam's answer; a bad view
    fails only that job."""
    frames = _frames()
    views = [make_image(5, height=64, width=64), make_image(6, height=48, width=80)]
    images = _mixed_jobs(frames)[:3]
    exam = Job(views, "segment", "lesion")
    bad_exam = Job([views[0], np.full((64, 64), np.nan, dtype=np.float32)], "diagnose", None)
    jobs = [images[0], exam, images[1], bad_exam, images[2], Job(tuple(views), "report", None)]
    chunks: list[int] = []
    answers = Predictor(trained_tiny, max_new_tokens=64, batch_size=8).predict_many(jobs, on_chunk=chunks.append)
    assert chunks == [5]  # one stacked batch: 3 images and 2 examinations (one layout, encoded together)
    eager = Predictor(trained_tiny, max_new_tokens=64, decode="eager")
    for k, job in ((1, exam), (5, jobs[5])):
        alone = eager.predict_exam(job.task, job.prompt, views=views)
        assert answers[k].views is not None and len(answers[k].views) == 2
        _assert_same(answers[k], alone)
        assert [o.view for o in answers[k].objects] == [o.view for o in alone.objects]
    assert isinstance(answers[3], PredictorError) and "view 2 of the examination" in str(answers[3])
    for job, res in zip(images, (answers[0], answers[2], answers[4])):
        _assert_same(res, _alone(trained_tiny, job))


def test_examinations_batch_by_every_views_size_and_eager_batches_by_prompt(trained_tiny):
    """A row's layout is all its views' sizes: two examinations whose first views match but whose second do not
    encode apart and each answers as alone. Without stacking (eager) only rows of one layout and one prompt share a
    batch, so two prompts on four same-size images are two batches."""
    a, b = make_image(5, height=64, width=64), make_image(6, height=48, width=80)
    exams = [Job([a, b], "report", None), Job([a, make_image(7, height=64, width=64)], "report", None)]
    chunks: list[int] = []
    answers = Predictor(trained_tiny, max_new_tokens=64, batch_size=8).predict_many(exams, on_chunk=chunks.append)
    eager = Predictor(trained_tiny, max_new_tokens=64, decode="eager")
    for job, res in zip(exams, answers):
        _assert_same(res, eager.predict_exam(job.task, job.prompt, views=job.image))
    frames = [make_image(s, height=64, width=64) for s in range(4)]
    jobs = [Job(f, "segment", "lesion" if i % 2 else "thyroid nodule") for i, f in enumerate(frames)]
    chunks = []
    answers = Predictor(trained_tiny, max_new_tokens=8, decode="eager").predict_many(jobs, on_chunk=chunks.append)
    assert sorted(chunks) == [2, 2] and all(res.prompt == job.prompt for job, res in zip(jobs, answers))


def test_predict_batch_still_refuses_the_whole_call_before_any_work(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64)
    with pytest.raises(PredictorError, match="non-finite"):
        p.predict_batch([make_image(0), np.full((64, 64), np.nan)], "segment", "lesion")
    assert p.last_stats == {}


@pytest.mark.parametrize("mode,n,rows", [("compiled", 4, 4), ("compiled", 3, 3), ("tuned", 3, 4)])
def test_compiled_step_on_a_stacked_batch_equals_static(trained_tiny, mode, n, rows):
    """Tuned, 3 jobs run in a bucket of 4 rows (the 4th a copy of the first, its answer dropped)."""
    pytest.importorskip("torch._dynamo")
    frames = _frames()
    jobs = _mixed_jobs(frames)[:n]
    static = Predictor(trained_tiny, max_new_tokens=64, decode="static").predict_many(jobs)
    compiled_p = Predictor(trained_tiny, max_new_tokens=64, decode=mode)
    compiled = compiled_p.predict_many(jobs)
    if compiled_p._engine.fast.compile_error:
        pytest.skip(f"torch.compile unavailable here: {compiled_p._engine.fast.compile_error}")
    assert len(compiled) == n
    for a, b in zip(compiled, static):
        _assert_same(a, b)
    # the steps after the image prefixes (each group of same-size frames has a prefix graph of its own rows)
    built = {key[0] for key in compiled_p._engine.fast._compiled if key[5] == "step"}
    # a tuned batch narrows to smaller buckets as its answers end (narrowing is tested below); a prompt fed in two
    # parts feeds its first part on the leading row alone (_prompt_split), which may run a lone row's graph
    assert rows in built and built <= ({1, 2, rows} if mode == "tuned" else {1, rows}), built


@pytest.mark.parametrize("mode", ["static", "tuned"])
def test_a_batch_narrows_to_its_live_rows_and_answers_as_each_alone(trained_tiny, monkeypatch, mode):
    """Once half the rows have finished, the others decode on a copy of the cache that holds only them."""
    from umind_core.inference.fast_decode import FastDecoder

    pytest.importorskip("torch._dynamo")
    narrowed, original = [], FastDecoder.narrowed

    def spy(self, cache, live):
        out = original(self, cache, live)
        if out is not None:
            narrowed.append((cache.rows, out.rows, len(live)))
        return out

    monkeypatch.setattr(FastDecoder, "narrowed", spy)
    jobs = _mixed_jobs(_frames())[:8]
    predictor = Predictor(trained_tiny, max_new_tokens=64, decode=mode)
    batched = predictor.predict_many(jobs)
    if predictor._engine.fast.compile_error:
        pytest.skip(f"torch.compile unavailable here: {predictor._engine.fast.compile_error}")
    assert narrowed and all(2 * after <= before and live <= after for before, after, live in narrowed), narrowed
    for job, res in zip(jobs, batched):
        _assert_same(res, _alone(trained_tiny, job))
    assert len({res.text for res in batched}) >= 6  # the jobs really asked different things


def test_tuned_batches_run_in_buckets_of_rows(trained_tiny):
    from umind_core.inference.fast_decode import FastDecoder

    tuned, compiled = FastDecoder(trained_tiny, tune=True), FastDecoder(trained_tiny, compile=True)
    assert [tuned.rows_for(b) for b in range(1, 11)] == [1, 2, 4, 4, 8, 8, 8, 8, 16, 16]
    assert [compiled.rows_for(b) for b in (1, 3, 5)] == [1, 3, 5]  # its graphs build fast: no idle rows


def _batches_once_served(scheduler: BatchScheduler, callers: int) -> list[int]:
    """The scheduler's callers per batch once `callers` were served: a caller is answered when its own jobs end,
    which can be before its batch has ended and been counted."""
    deadline = time.monotonic() + 60
    while sum(scheduler.batches) < callers and time.monotonic() < deadline:
        time.sleep(0.01)
    return scheduler.batches


def test_scheduler_batches_concurrent_callers_and_each_gets_its_own_answers(trained_tiny):
    frames = _frames()
    jobs = _mixed_jobs(frames)
    expected = [_alone(trained_tiny, job) for job in jobs]
    scheduler = BatchScheduler(Predictor(trained_tiny, max_new_tokens=64, batch_size=8), window_ms=200)
    bad = Job(frames[0], "segment", "lesion", points=[[10.0, 10.0]], labels=[1, 0])
    answers: dict[int, object] = {}
    gate = threading.Barrier(len(jobs) + 1)

    def caller(i, job):
        gate.wait()
        answers[i] = scheduler.run([job])

    threads = [threading.Thread(target=caller, args=(i, job)) for i, job in enumerate(jobs + [bad])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    batches = _batches_once_served(scheduler, len(jobs) + 1)
    assert sum(batches) == len(jobs) + 1 and max(batches) > 1, batches  # callers shared a batch
    for i, job in enumerate(jobs):
        (res,) = answers[i]
        _assert_same(res, expected[i])
    (refused,) = answers[len(jobs)]
    assert isinstance(refused, PredictorError)
    with pytest.raises(PredictorError):
        scheduler.predict([bad])


def _called_together(scheduler: BatchScheduler, jobs: dict[str, Job]) -> dict[str, object]:
    """Each named job sent by its own caller thread, all released at once: its Result, or the RuntimeError its
    caller got."""
    results: dict[str, object] = {}
    gate = threading.Barrier(len(jobs))

    def call(name, job):
        gate.wait()
        try:
            results[name] = scheduler.predict([job])[0]
        except RuntimeError as exc:
            results[name] = exc

    threads = [threading.Thread(target=call, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_scheduler_reruns_callers_alone_when_a_whole_batch_fails(trained_tiny):
    class Flaky(Predictor):
        def predict_many(self, jobs, on_chunk=None, on_answer=None):
            if any(j.prompt == "poison" for j in jobs):
                raise RuntimeError("poisoned batch")
            return super().predict_many(jobs, on_chunk, on_answer)

    frames = _frames()
    scheduler = BatchScheduler(Flaky(trained_tiny, max_new_tokens=64), window_ms=200)
    results = _called_together(scheduler, {"good": Job(frames[0], "segment", "lesion"),
                                           "bad": Job(frames[1], "segment", "poison")})
    assert isinstance(results["bad"], RuntimeError)
    _assert_same(results["good"], _alone(trained_tiny, Job(frames[0], "segment", "lesion")))


def test_scheduler_worker_ends_when_idle(trained_tiny):
    scheduler = BatchScheduler(Predictor(trained_tiny, max_new_tokens=8), window_ms=0, idle_s=0.05)
    scheduler.run([Job(make_image(0), "diagnose", None)])
    worker = scheduler._worker
    if worker is not None:
        worker.join(timeout=5)
    assert scheduler._worker is None or not worker.is_alive()
    assert len(scheduler.run([Job(make_image(0), "diagnose", None)])) == 1  # and starts again
    with pytest.raises(ValueError, match="window_ms"):
        BatchScheduler(Predictor(trained_tiny), window_ms=-1)


class _SlowEcho:
    """A stand-in Predictor: a batch costs `batch_s` whatever its size (as on a GPU) and answers each job with
    itself; what the regroup tests look at is only how the scheduler groups callers."""

    batch_size = 8

    def __init__(self, batch_s: float):
        self.batch_s = batch_s

    def predict_many(self, jobs, on_chunk=None, on_answer=None):
        time.sleep(self.batch_s)
        return list(jobs)


def _cohorts(scheduler: BatchScheduler, clients: int, rounds: int, think_s: float) -> None:
    """Closed-loop clients in two cohorts: half start now, half half a batch later; each sends its next job
    `think_s` after its answer, as an annotator's client writing a reply and sending the next request does.
    Every caller must get its own answer (checked here, on the test's thread: a failed assert inside a client
    thread would not fail the test)."""
    answers: dict[tuple[int, int], list] = {}

    def client(c):
        time.sleep(0.0 if c < clients // 2 else scheduler.predictor.batch_s / 2)
        for r in range(rounds):
            answers[(c, r)] = scheduler.run([(c, r)])
            time.sleep(think_s)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    expected = {(c, r): [(c, r)] for c in range(clients) for r in range(rounds)}
    assert answers == expected


class _StepClock:
    """Time that moves only when the test moves it (`BatchScheduler(clock=...)`): the worker's window, regroup and
    idle deadlines pass when the schedule says so, never because a thread ran late on a loaded machine. It notes
    the worker's deadline and the queue it saw each time the worker blocks, so the test knows the worker has
    settled."""

    def __init__(self):
        self.t = 0.0
        self.deadline: float | None = None  # when the blocked worker's wait runs out; None while it runs
        self.seen: int | None = None  # the callers queued when the worker blocked
        self.scheduler: BatchScheduler | None = None

    def now(self) -> float:
        return self.t

    def wait(self, cond, timeout: float) -> None:
        self.deadline, self.seen = self.t + timeout, len(self.scheduler._queue)
        cond.notify_all()  # the test waits on the same condition for the worker to settle
        cond.wait()  # only a caller or `advance` wakes it: no deadline passes by itself
        self.deadline = self.seen = None

    def advance(self, to: float) -> None:
        """Move to `to` (a little past it, so that a deadline computed in floating point has surely passed) and wake
        the worker: it has not settled again until it blocks anew or takes a batch."""
        with self.scheduler._cond:
            self.t = max(to, self.t) + 1e-9
            self.deadline = self.seen = None
            self.scheduler._cond.notify_all()


class _TimedEcho:
    """A stand-in Predictor whose batch lasts until the test ends it (`batch_s` of the step clock's time)."""

    batch_size = 8

    def __init__(self):
        self.batches: list[list] = []  # every batch's jobs, in order
        self.running: list | None = None  # the batch in the Predictor now
        self.scheduler: BatchScheduler | None = None
        self._end = threading.Semaphore(0)

    def predict_many(self, jobs, on_chunk=None, on_answer=None):
        with self.scheduler._cond:
            self.running = list(jobs)
            self.batches.append(self.running)
            self.scheduler._cond.notify_all()
        self._end.acquire()
        return list(jobs)

    def end(self) -> list:
        """End the running batch; its jobs."""
        jobs, self.running = self.running, None
        self._end.release()
        return jobs


def _step_cohorts(window_ms: float, regroup_ms: float, clients: int = 8, rounds: int = 6, batch_s: float = 0.1,
                  think_s: float = 0.01) -> BatchScheduler:
    """Closed-loop clients in two cohorts on a step clock: half ask at 0, half half a batch later, a batch takes
    `batch_s`, and each client asks again `think_s` after its answer (an annotator's client writing a reply and
    sending the next request). The test plays the schedule event by event: it lets the next client due ask, or
    ends the batch due, or moves time to the worker's deadline, each only once the worker has settled (in the
    Predictor, or blocked having seen every caller queued); clients due at one instant ask one after another. So
    the batches follow from the schedule alone. Every caller must get its own answer."""
    import heapq

    clock, echo = _StepClock(), _TimedEcho()
    scheduler = BatchScheduler(echo, window_ms=window_ms, regroup_ms=regroup_ms, clock=clock)
    clock.scheduler = echo.scheduler = scheduler
    go = [threading.Semaphore(0) for _ in range(clients)]
    answers: dict[tuple[int, int], list] = {}
    asked = [0] * clients

    def client(c):
        for r in range(rounds):
            go[c].acquire()
            answers[(c, r)] = scheduler.run([(c, r)])

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    events = [(0.0 if c < clients // 2 else batch_s / 2, "ask", c) for c in range(clients)]
    heapq.heapify(events)
    in_flight, ends_at, scheduled = 0, None, 0

    def settled() -> bool:
        queued = len(scheduler._queue)
        if queued + len(echo.running or ()) != in_flight:
            return False  # a caller let go has not reached the queue yet
        return echo.running is not None or clock.seen == queued or (scheduler._worker is None and not in_flight)

    for _ in range(10_000):
        with scheduler._cond:
            assert scheduler._cond.wait_for(settled, timeout=30), (
                f"the worker did not settle at {clock.t}: {len(scheduler._queue)} queued, running {echo.running}, "
                f"{in_flight} in flight, seen {clock.seen}, batches {scheduler.batches}")
            if echo.running is not None and len(echo.batches) > scheduled:  # a batch just began
                scheduled, ends_at = len(echo.batches), clock.t + batch_s
            deadline = clock.deadline
        due = min(([events[0][0]] if events else []) + ([ends_at] if ends_at is not None else []), default=None)
        if due is None and in_flight == 0:
            break  # every client answered
        if due is None or (deadline is not None and deadline < due):
            clock.advance(deadline)  # the worker's window, regroup wait or idle time runs out first
            continue
        if due > clock.t:
            clock.advance(due)
        if ends_at is not None and ends_at <= clock.t:
            ends_at = None
            for c, _ in echo.end():
                in_flight -= 1
                if asked[c] < rounds:
                    heapq.heappush(events, (due + think_s, "ask", c))
            continue
        _, _, c = heapq.heappop(events)  # one client at a time: the worker sees each arrive, even at one instant
        asked[c] += 1
        in_flight += 1
        go[c].release()
    else:
        raise AssertionError(f"the schedule did not end: batches {scheduler.batches}")
    for t in threads:
        t.join(timeout=30)
    worker = scheduler._worker
    clock.advance(clock.deadline)  # idle_s without work: the worker ends
    worker.join(timeout=30)
    assert not worker.is_alive() and scheduler._worker is None
    assert answers == {(c, r): [(c, r)] for c in range(clients) for r in range(rounds)}
    assert [len(b) for b in echo.batches] == scheduler.batches
    return scheduler


def test_scheduler_regroup_merges_cohorts_of_closed_loop_clients():
    """Closed-loop clients that start apart stay in cohorts with the plain window; holding the batch for the
    callers just answered merges them into batches of 8. Played on a step clock (`_step_cohorts`), so the batches
    are the same on every run. The window is 1 ms, not 0: a cohort's four clients ask at the same instant, and
    only a window lets them in as one batch whatever order their threads run in; it is far below the 10 ms a
    client thinks and the 50 ms between the cohorts."""
    plain = _step_cohorts(window_ms=1, regroup_ms=0)
    assert plain.batches == [4] * 12  # the cohorts never meet
    assert plain.stats()["regrouped"] == 0
    regroup = _step_cohorts(window_ms=1, regroup_ms=1000)
    # the second cohort waits for the first; its last round, alone, waits the whole regroup time for it
    assert regroup.batches == [4, 8, 8, 8, 8, 8, 4], regroup.batches
    assert regroup.stats()["regrouped"] == 6 and regroup.stats()["held_to_end"] == 1, regroup.stats()


def test_scheduler_regroup_holds_for_the_callers_in_flight_not_more():
    """Callers answered early (as their own jobs end) are queued again before the batch ends: counting them once
    more would hold every next batch for callers that never come. Three closed-loop clients with a 1 s regroup
    wait: batches of 3, none held to the end of the wait (the scheduler counts them: `held_to_end`; counting the
    early callers twice held every batch to the end, 6 of them here)."""
    class EarlyEcho(_SlowEcho):
        def predict_many(self, jobs, on_chunk=None, on_answer=None):
            for i, job in enumerate(jobs):
                on_answer(i, job)
            time.sleep(self.batch_s)  # the batch goes on after its callers were answered
            return list(jobs)

    scheduler = BatchScheduler(EarlyEcho(0.05), window_ms=0, regroup_ms=1000)
    _cohorts(scheduler, clients=3, rounds=6, think_s=0.0)
    assert _batches_once_served(scheduler, 18).count(3) >= 4, scheduler.batches
    assert scheduler.stats()["held_to_end"] <= 1, scheduler.stats()  # counting callers twice: 6 held to the end


def test_scheduler_regroup_never_holds_a_lone_client():
    """One client alone expects only itself: with a regroup wait of 1 s no batch is held for anyone."""
    scheduler = BatchScheduler(_SlowEcho(0.01), window_ms=0, regroup_ms=1000)
    for r in range(5):
        assert scheduler.run([("alone", r)]) == [("alone", r)]
    assert scheduler.batches == [1] * 5
    assert scheduler.stats()["regrouped"] == 0
    with pytest.raises(ValueError, match="regroup_ms"):
        BatchScheduler(_SlowEcho(0.01), regroup_ms=-1)


def test_stacked_cache_hides_holes():
    """A row whose prefix is shorter attends to exactly its own slots: the stacked cache's valid mask."""
    from umind_core.inference.fast_decode import StaticKVCache

    def cache(length, value):
        k = torch.full((1, 2, 8, 4), float(value))
        return StaticKVCache([k], [k.clone()], length)

    stacked = StaticKVCache.stack([(cache(3, 1), 0), (cache(5, 2), 0)], capacity=16)
    assert stacked.length == 5 and not stacked.uniform
    assert stacked.valid[0].tolist()[:6] == [False, False, True, True, True, True]
    assert stacked.valid[1, :5].all()
    assert torch.equal(stacked.keys[0][0, :, 2:5], torch.ones(2, 3, 4))
    assert torch.equal(stacked.keys[0][0, :, :2], torch.zeros(2, 2, 4))


def test_scheduler_runs_the_model_on_its_executor():
    """With an executor, every batch's predict_many runs on the executor's one thread, not on the scheduler's
    worker (the server keeps its model's work on one thread: torch's OpenMP slows every other thread)."""
    from concurrent.futures import ThreadPoolExecutor

    class ThreadEcho(_SlowEcho):
        def predict_many(self, jobs, on_chunk=None, on_answer=None):
            return [(threading.current_thread().name, job) for job in jobs]

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model") as model_thread:
        scheduler = BatchScheduler(ThreadEcho(0), window_ms=0, executor=model_thread)
        names = {name for r in range(3) for name, _ in scheduler.run([r])}
    assert len(names) == 1 and names.pop().startswith("model"), names
    alone = BatchScheduler(ThreadEcho(0), window_ms=0)  # without one: the scheduler's own worker
    assert alone.run([0])[0][0] == "umind-batch"


def test_a_short_answer_is_handed_on_while_the_batch_decodes_on(trained_tiny):
    """`predict_many(on_answer=...)` gives each job's Result the moment its answer ends: the one-word diagnosis
    before the report that shares its batch has finished decoding, and the same Result it returns and would
    give alone. (Static decoding: the eager path batches only jobs with one prompt.)"""
    frame = make_image(0)
    prompts = {task: prompt for task, (prompt, _) in task_answers().items()}
    jobs = [Job(frame, "report", prompts["report"]), Job(frame, "diagnose", prompts["diagnose"])]
    predictor = Predictor(trained_tiny, max_new_tokens=64, decode="static")
    forwards = []
    real_forward = predictor._engine.forward

    def counting_forward(*args, **kwargs):
        forwards.append(1)
        return real_forward(*args, **kwargs)

    predictor._engine.forward = counting_forward
    handed: list[tuple[int, object, int]] = []
    answers = predictor.predict_many(jobs, on_answer=lambda i, res: handed.append((i, res, len(forwards))))
    assert [i for i, _, _ in handed] == [1, 0]  # the diagnosis first
    assert handed[0][2] < handed[1][2] == len(forwards)  # ... while the report still had forwards to go
    assert [res for _, res, _ in sorted(handed, key=lambda h: h[0])] == answers
    for job, res in zip(jobs, answers):
        _assert_same(res, _alone(trained_tiny, job))
    assert len(answers[0].text) > 2 * len(answers[1].text), [a.text for a in answers]


def test_scheduler_answers_each_caller_as_soon_as_its_jobs_are():
    """A caller whose jobs are answered gets them while the batch goes on: here the batch cannot end until the
    first caller has its answer (it waits for that, 10 s at most), and says whether it saw it in time."""
    seen = threading.Event()

    class Early(_SlowEcho):
        def predict_many(self, jobs, on_chunk=None, on_answer=None):
            on_answer(0, jobs[0])
            in_time = seen.wait(10)
            return [jobs[0]] + [(job, in_time) for job in jobs[1:]]

    scheduler = BatchScheduler(Early(0), window_ms=300, regroup_ms=0)
    answers = {}

    def first():
        answers["first"] = scheduler.run(["first"])
        seen.set()

    a = threading.Thread(target=first)
    a.start()
    time.sleep(0.05)
    answers["second"] = scheduler.run(["second"])
    a.join(timeout=30)
    assert answers == {"first": ["first"], "second": [("second", True)]}


def test_a_batch_failing_after_early_answers_reruns_only_the_unanswered(trained_tiny):
    """A caller answered before its batch failed keeps that answer and is not run again; the caller left without
    one is run alone, where the failure is its own."""
    runs = []

    class FailsOnReports(Predictor):
        def predict_many(self, jobs, on_chunk=None, on_answer=None):
            runs.append([job.task for job in jobs])
            return super().predict_many(jobs, on_chunk, on_answer)

        def _result(self, state, b, dec, task, prompt, warnings):
            if task == "report":
                raise RuntimeError("report writer broke")
            return super()._result(state, b, dec, task, prompt, warnings)

    prompts = {task: prompt for task, (prompt, _) in task_answers().items()}
    short, long = Job(make_image(0), "diagnose", prompts["diagnose"]), Job(make_image(1), "report", prompts["report"])
    scheduler = BatchScheduler(FailsOnReports(trained_tiny, max_new_tokens=64, decode="static"), window_ms=300)
    answers = _called_together(scheduler, {"short": short, "long": long})
    assert isinstance(answers["long"], RuntimeError)
    _assert_same(answers["short"], _alone(trained_tiny, short))
    assert sorted(map(sorted, runs)) == [["diagnose", "report"], ["report"]], runs


def test_prompt_split_feeds_the_long_rows_first_columns_apart_where_that_pays():
    from umind_core.inference.fast_decode import StaticKVCache
    from umind_core.inference.decode_batch import PROMPT_PART_POSITIONS, _prompt_split

    def cache(rows):
        return StaticKVCache([torch.zeros(rows, 1, 128, 2)], [torch.zeros(rows, 1, 128, 2)], 10)

    def pad(shifts, width):
        return torch.arange(width)[None, :] < torch.tensor(shifts)[:, None]

    # the bench's batch: 62-token prompts with clicks, then 32, 24 and 17: 496 positions, 348 with the split at 30
    shifts = [0, 0, 30, 30, 38, 38, 45, 45]
    assert _prompt_split(pad(shifts, 62), cache(8), 8) == (2, 30)
    assert PROMPT_PART_POSITIONS + 2 * 30 + 8 * 32 < 8 * 62
    assert _prompt_split(pad([0, 1, 1, 1], 20), cache(4), 4) is None  # one saved column does not pay a forward
    assert _prompt_split(pad([30, 0], 62), cache(2), 2) is None  # not longest first
    assert _prompt_split(pad(shifts, 62), cache(8), 5) is None  # bucket rows beside the batch's
    assert _prompt_split(None, cache(8), 8) is None


def test_a_split_prompt_feed_answers_as_each_alone(trained_tiny, monkeypatch):
    """The mixed batch (clicks, a box and plain prompts) is fed in two parts, and every job still answers as alone."""
    from umind_core.inference import decode_batch

    splits = []
    real = decode_batch._prompt_split

    def spy(pad, cache, batch):
        splits.append(real(pad, cache, batch))
        return splits[-1]

    monkeypatch.setattr(decode_batch, "_prompt_split", spy)
    frames = _frames()
    jobs = _mixed_jobs(frames)
    batched = Predictor(trained_tiny, max_new_tokens=64, decode="static", batch_size=9).predict_many(jobs)
    assert len(splits) == 1 and splits[0] is not None, splits
    for job, res in zip(jobs, batched):
        _assert_same(res, _alone(trained_tiny, job))


def test_the_regroup_wait_expects_last_batchs_callers_for_twice_the_wait_after_it():
    """Callers answered at a batch's end come back within about a regroup wait: the next batch holds for them while
    its first job arrives within twice `regroup_ms` of that end, after that nobody is expected."""
    scheduler = BatchScheduler(_SlowEcho(0.0), regroup_ms=30.0)
    scheduler._last_end = (10.0, 5)
    assert scheduler._expected(10.0 + 0.045) == 5  # 45 ms after: within 60
    assert scheduler._expected(10.0 + 0.065) == 1
    assert BatchScheduler(_SlowEcho(0.0), regroup_ms=0.0)._expected(10.0) == 1


def test_a_batch_holds_at_most_the_predictors_batch_size_unless_told():
    echo = _SlowEcho(0.0)
    echo.batch_size = 3
    assert BatchScheduler(echo).max_jobs == 3 and BatchScheduler(echo, max_jobs=5).max_jobs == 5


def test_a_closed_schedulers_worker_ends_at_once_and_a_later_call_starts_another():
    scheduler = BatchScheduler(_SlowEcho(0.0), idle_s=60.0)
    assert scheduler.run(["a"]) == ["a"]
    worker = scheduler._worker
    assert worker is not None and worker.is_alive()
    scheduler.close(timeout=10.0)
    assert not worker.is_alive() and scheduler._worker is None  # not 60 s of idling
    assert scheduler.run(["b"]) == ["b"]
    scheduler.close(timeout=10.0)



def test_every_scheduler_is_closed_when_the_interpreter_exits():
    """An idling worker nobody closed is ended by the scheduler module's atexit hook, before finalization could
    stop it mid-wait (a process abort after its work succeeded). A hook registered before the module's import
    runs after it (atexit is last in, first out) and reports what it finds."""
    import os
    import subprocess
    import sys

    script = """
import atexit
seen = {}
atexit.register(lambda: print("alive" if seen["s"]._worker is not None and seen["s"]._worker.is_alive() else "closed"))
from umind_core.inference.scheduler import BatchScheduler
class Echo:
    batch_size = 8
    def predict_many(self, jobs, on_chunk=None, on_answer=None):
        return list(jobs)
seen["s"] = BatchScheduler(Echo(), idle_s=600.0)
assert seen["s"].run(["a"]) == ["a"]
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0 and out.stdout.strip() == "closed", out.stderr[-2000:]
