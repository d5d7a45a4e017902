"""Cross-request batching: concurrent callers' jobs gathered for a few ms and answered by one `predict_many`.

Why: a decode step costs about the same for one row as for eight (it is bound by per-step overhead and, on a
GPU, by reading the weights), so requests that queue one by one behind a lock each pay the whole step alone.
Here every caller (a server thread per HTTP request, a `umind infer` worker per input file) hands its jobs to
one scheduler and blocks; a worker thread takes what has arrived (waiting up to `window_s` for more once the
first job is in, up to `max_jobs`), runs it through `Predictor.predict_many` (which stacks different images
and prompts into one batch) and hands each caller its own answers.

A caller does not wait for the whole batch: it is answered the moment its own jobs end (`predict_many`'s
`on_answer`), so a segment of 20 tokens does not wait for the report of 80 beside it, and its reply is written
while the batch decodes on. Letting callers that arrive meanwhile join the running batch (continuous batching)
was built and measured slower here (benchmarks/results/batching/NOTES.md), and reverted.

Failure stays with its owner: a job the Predictor refuses comes back as that job's PredictorError, and if a
batch of several callers fails as a whole (an error no single input explains), each caller's jobs are run
again alone, so one poisoned request cannot fail the others.

Waiting for the callers who just got their answers (`regroup_ms`): clients that each wait for their answer
before sending the next request fall into cohorts. Over HTTP, 8 annotators ran as two cohorts of 4, each batch
taken the moment the last one ended while the other cohort was still writing its replies and sending its next
requests: batches of 4 where one of 8 would share each decode step (on a GPU at about the cost of one row). So
when a batch ends the worker notes who is likely to ask next: the most callers that were in flight (in the batch
or queued) while it ran. If the next batch's first job arrives soon after (within twice `regroup_ms`), the batch
is held up to `regroup_ms` until that many callers are in. A lone client expects only itself and goes at once; the wait
happens only while several callers are active, and is bounded. 30 ms by default: with 8 HTTP clients on 2 CPU
cores it took a tuned server from 21.4-25.2 to 24.1-28.0 requests/s (1.40-1.42x the one-by-one rate against
1.78-1.85x; 2 and 3 runs) and a static one from 15.8-17.0 to 21.7-24.3 (1.45-1.87x against 1.82-2.11x; 2 and 4
runs; benchmarks/results/batching/NOTES.md).

The worker thread starts with the first call and ends after `idle_s` without work, so a scheduler whose
Predictor was replaced (a promoted version) leaves no thread behind; `close` ends it at once (a caller done with
the scheduler), and every scheduler is closed when the interpreter exits (`_close_all`).

The worker reads and waits for time through a `clock` (`MonotonicClock` unless given another): how callers are
grouped depends on when they arrive against the window and the regroup wait, so a test that steps a clock of its
own through a schedule checks the grouping without depending on how fast threads happen to run.

Where the model runs (`executor`): given one, the worker hands each batch's `predict_many` to it and waits, so
that the model's work stays on one long-lived thread. Why: torch's OpenMP runtime (libgomp) keeps a pool of
helper threads for every thread that has run a parallel region, and once the helpers outnumber the cores it stops
letting them spin between regions; every region then waits for its helpers to wake. Measured on 2 cores: the same
requests took 37 ms each with 2 cores busy on the only thread that had run torch, 52 ms with 1.24 on a second
one (`benchmarks/bench_worker_thread.py`). The server loads its model and answers on one such thread
(`monailabel_app/lib/model_holder.MODEL_THREAD`).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..answers.results import Result
from .predictor import Job, Predictor, PredictorError

__all__ = ["BatchScheduler", "DEFAULT_WINDOW_MS", "DEFAULT_REGROUP_MS", "MODEL_THREAD_PREFIX", "MonotonicClock",
           "model_thread"]

DEFAULT_WINDOW_MS = 3.0
DEFAULT_REGROUP_MS = 30.0
MODEL_THREAD_PREFIX = "umind-model"


def model_thread() -> ThreadPoolExecutor:
    """The one thread a process loads its model on and hands to BatchScheduler as `executor` (module docstring:
    where the model runs); the server keeps one for its life, `umind infer --parallel` one per run."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=MODEL_THREAD_PREFIX)


class MonotonicClock:
    """The worker's time: `now()` in seconds, and `wait(cond, timeout)`, a wait on the scheduler's condition (held by
    the caller) until a caller notifies it or `timeout` seconds pass."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        cond.wait(timeout)


@dataclass
class _Ticket:
    jobs: list[Job]
    future: Future = field(default_factory=Future)


class BatchScheduler:
    def __init__(self, predictor: Predictor, window_ms: float = DEFAULT_WINDOW_MS, max_jobs: int | None = None,
                 idle_s: float = 5.0, regroup_ms: float = DEFAULT_REGROUP_MS, executor=None, clock=None):
        if window_ms < 0:
            raise ValueError(f"window_ms must be 0 or more, got {window_ms}")
        if regroup_ms < 0:
            raise ValueError(f"regroup_ms must be 0 or more, got {regroup_ms}")
        self.predictor = predictor
        self.executor = executor  # where predict_many runs (anything with `submit`); None = the worker thread
        self._clock = clock if clock is not None else MonotonicClock()  # the worker's now() and timed waits
        self.window_s = float(window_ms) / 1000.0
        self.regroup_s = float(regroup_ms) / 1000.0
        self._last_end: tuple[float, int] | None = None  # (when, callers in flight at most) of the last batch
        self._running = 0  # callers of the running batch not answered yet
        self._peak = 0  # the most callers in flight (running + queued) while the running batch ran
        self._regrouped = 0  # batches held for callers expected back (`regroup_ms`)
        self._held_to_end = 0  # of those, the batches held the whole wait for callers who did not come
        self.max_jobs = int(max_jobs or predictor.batch_size)
        self.idle_s = float(idle_s)
        self._queue: list[_Ticket] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closing = False  # `close` asked the worker to end now rather than after `idle_s`
        _SCHEDULERS.add(self)
        self._history: list[tuple[int, float]] = []  # (callers, seconds in the Predictor) of the last 1000 batches

    def run(self, jobs: Sequence[Job]) -> list[Result | PredictorError]:
        """Each job's Result, or the PredictorError that refused it; blocks until the batch holding them ran."""
        jobs = list(jobs)
        if not jobs:
            return []
        ticket = _Ticket(jobs)
        with self._cond:
            self._queue.append(ticket)
            self._peak = max(self._peak, self._running + len(self._queue))
            self._cond.notify_all()
            if self._worker is None:
                self._closing = False
                self._worker = threading.Thread(target=self._loop, name="umind-batch", daemon=True)
                self._worker.start()
        return ticket.future.result()

    def predict(self, jobs: Sequence[Job]) -> list[Result]:
        """As `run`, raising the first refusal instead of returning it (callers whose jobs stand or fall together)."""
        answers = self.run(jobs)
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return answers  # type: ignore[return-value]

    def close(self, timeout: float = 30.0) -> None:
        """End the worker thread now (once the queue is empty) rather than `idle_s` later, and wait for it.

        Why: a caller that is done with the scheduler (`umind infer` at the end of its run) would otherwise leave
        a daemon thread waiting out its idle time; one still alive while Python exits can abort the process
        ("terminate called without an active exception", exit 134) after all its work succeeded. A later `run`
        starts a new worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    @property
    def batches(self) -> list[int]:
        """Callers per recent batch, most recent last."""
        return [callers for callers, _ in self._history]

    def reset_stats(self) -> None:
        self._history, self._regrouped, self._held_to_end = [], 0, 0

    def stats(self) -> dict:
        """How the recent batches were filled (the last 1000): what an operator tunes `window_ms` by.

        ``regrouped`` counts the batches held for callers expected back, ``held_to_end`` those of them whose whole
        regroup wait passed without those callers: a count that grows with every batch means the scheduler
        expects callers that never come (each such batch costs `regroup_ms`)."""
        recent = list(self._history)
        n = len(recent)
        return {"window_ms": self.window_s * 1000.0, "regroup_ms": self.regroup_s * 1000.0,
                "max_jobs": self.max_jobs, "batches": n,
                "mean_callers": round(sum(c for c, _ in recent) / n, 3) if n else None,
                "max_callers": max(c for c, _ in recent) if n else None,
                "mean_batch_s": round(sum(s for _, s in recent) / n, 4) if n else None,
                "regrouped": self._regrouped, "held_to_end": self._held_to_end}

    # ------------------------------------------------------------------ worker
    def _take(self) -> list[_Ticket] | None:
        """The tickets of the next batch, or None when the worker should end (idle too long)."""
        with self._cond:
            idle_until = self._clock.now() + self.idle_s
            while not self._queue:
                left = idle_until - self._clock.now()
                if left <= 0 or self._closing:
                    self._worker = None
                    return None
                self._clock.wait(self._cond, left)
            now = self._clock.now()
            window_end, regroup_end, expected = now + self.window_s, now + self.regroup_s, self._expected(now)
            self._regrouped += len(self._queue) < expected
            while sum(len(t.jobs) for t in self._queue) < self.max_jobs:
                now = self._clock.now()
                holding = len(self._queue) < expected
                left = (regroup_end if holding else window_end) - now
                if left <= 0:
                    self._held_to_end += holding
                    break
                self._clock.wait(self._cond, left)
            taken, count = [], 0
            while self._queue and (not taken or count + len(self._queue[0].jobs) <= self.max_jobs):
                ticket = self._queue.pop(0)
                taken.append(ticket)
                count += len(ticket.jobs)
            self._running, self._peak = len(taken), len(taken) + len(self._queue)
            return taken

    def _expected(self, now: float) -> int:
        """How many callers to hold the next batch for: the most that were in flight (answered or not by the last
        batch, or queued behind it) while it ran, if it ended lately; else 1 (no wait), as when regrouping is off.

        Not the last batch's callers plus those queued at its end: a caller answered early (as its own job ended)
        may be queued again by then, and would be counted twice; 3 clients would then hold every batch for 5 or
        6 callers, the whole regroup wait."""
        if self.regroup_s <= 0 or self._last_end is None or now - self._last_end[0] > 2.0 * self.regroup_s:
            return 1
        return max(1, self._last_end[1])

    def _loop(self) -> None:
        while True:
            tickets = self._take()
            if tickets is None:
                return
            t0 = time.perf_counter()
            self._serve(tickets)
            self._history = (self._history + [(len(tickets), time.perf_counter() - t0)])[-1000:]
            with self._cond:
                self._last_end = (self._clock.now(), self._peak)

    def _serve(self, tickets: list[_Ticket]) -> None:
        """Run the tickets' jobs as one `predict_many`; each caller is answered as soon as all its jobs are (a
        segment does not wait for the report that shares its batch). A Predictor that hands nothing on early is
        answered from what it returns."""
        jobs = [job for t in tickets for job in t.jobs]
        owner = [(k, j) for k, t in enumerate(tickets) for j in range(len(t.jobs))]
        answers: list[list] = [[None] * len(t.jobs) for t in tickets]
        left = [len(t.jobs) for t in tickets]

        def on_answer(i: int, answer) -> None:
            k, j = owner[i]
            answers[k][j] = answer
            left[k] -= 1
            if left[k] == 0:
                with self._cond:
                    self._running = max(0, self._running - 1)
                tickets[k].future.set_result(answers[k])

        try:
            if self.executor is None:
                returned = self.predictor.predict_many(jobs, on_answer=on_answer)
            else:
                returned = self.executor.submit(self.predictor.predict_many, jobs, on_answer=on_answer).result()
        except BaseException as exc:  # noqa: BLE001 - decided per caller below
            unanswered = [t for k, t in enumerate(tickets) if left[k] > 0]
            if len(tickets) == 1 and unanswered:
                tickets[0].future.set_exception(exc)
                return
            for ticket in unanswered:  # no single input explains it: each caller alone, so only the culprit fails
                self._serve([ticket])
            return
        for k, ticket in enumerate(tickets):
            if left[k] > 0:
                start = next(i for i, (kk, _) in enumerate(owner) if kk == k)
                ticket.future.set_result(returned[start: start + len(ticket.jobs)])


#: every scheduler of this process (a running worker holds its own), closed when the interpreter exits
_SCHEDULERS: "weakref.WeakSet[BatchScheduler]" = weakref.WeakSet()


def _close_all() -> None:
    """End every scheduler's worker before Python finalizes: atexit callbacks run before daemon threads are stopped,
    and a worker stopped mid-wait by finalization can abort the process (exit 134) after its work succeeded: a
    server stopped within `idle_s` of its last request, a script that never calls `close`."""
    for scheduler in list(_SCHEDULERS):
        scheduler.close()


atexit.register(_close_all)
