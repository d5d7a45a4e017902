"""Cross-request batching: concurrent callers' jobs gathered for a few ms and answered by one `predict_many`.

Why: a decode step costs about the same for one row as for eight (it is bound by per-step overhead and, on a
GPU, by reading the weights), so requests that queue one by one behind a lock each pay the whole step alone.
Here every caller (a server thread per HTTP request, a `umind infer` worker per input file) hands its jobs to
one scheduler and blocks; a worker thread takes what has arrived (waiting up to `window_s` for more once the
first job is in, up to `max_jobs`), runs it through `Predictor.predict_many` (which stacks different images
and prompts into one batch) and hands each caller its own answers.

A caller does not wait for the whole batch: it is answered the moment its own jobs end (a segment of 20 tokens
beside a report of 80), and callers that arrive while a batch decodes join it where it has free rows
(`Predictor.predict_many`'s `more`: their images are encoded and their prompts fed, then their rows are stacked
into the running cache), instead of waiting for its last, longest answer. Both keep every answer what it would
be alone.

Failure stays with its owner: a job the Predictor refuses comes back as that job's PredictorError, and if a
batch of several callers fails as a whole (an error no single input explains), each caller's jobs are run
again alone, so one poisoned request cannot fail the others.

Waiting for the callers who just got their answers (`regroup_ms`): clients that each wait for their answer
before sending the next request fall into cohorts. Over HTTP, 8 annotators ran as two cohorts of 4, each batch
taken the moment the last one ended while the other cohort was still writing its replies and sending its next
requests: batches of 4 where one of 8 would share each decode step (on a GPU at about the cost of one row). So
when a batch ends the worker notes who is likely to ask next: the callers it answered in its last 2 x
`regroup_ms` (those answered earlier have asked again already, or joined) plus those already queued. If the next batch's first job arrives soon after (within twice `regroup_ms`), the batch is held up to
`regroup_ms` until that many callers are in. A lone client expects only itself and goes at once; the wait
happens only while several callers are active, and is bounded. 30 ms by default: with 8 HTTP clients on 2 CPU
cores it took a tuned server from 21.4-25.2 to 24.1-28.0 requests/s (1.40-1.42x the one-by-one rate against
1.78-1.85x; 2 and 3 runs) and a static one from 15.8-17.0 to 21.7-24.3 (1.45-1.87x against 1.82-2.11x; 2 and 4
runs; README "Many annotators on one model").

The worker thread starts with the first call and ends after `idle_s` without work, so a scheduler whose
Predictor was replaced (a promoted version) leaves no thread behind.

Where the model runs (`executor`): given one, the worker hands each batch's `predict_many` to it and waits, so
that the model's work stays on one long-lived thread. Why: torch's OpenMP runtime (libgomp) keeps a pool of
helper threads for every thread that has run a parallel region, and once the helpers outnumber the cores it stops
letting them spin between regions; every region then waits for its helpers to wake. Measured on 2 cores: the same
requests took 37 ms each with 2 cores busy on the only thread that had run torch, 52 ms with 1.24 on a second
one (`benchmarks/bench_worker_thread.py`). The server loads its model and answers on one such thread
(`monailabel_app/lib/model_holder.MODEL_THREAD`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .predictor import Job, Predictor, PredictorError
from .results import Result

__all__ = ["BatchScheduler", "DEFAULT_WINDOW_MS", "DEFAULT_REGROUP_MS", "MODEL_THREAD_PREFIX", "model_thread"]

DEFAULT_WINDOW_MS = 3.0
DEFAULT_REGROUP_MS = 30.0
MODEL_THREAD_PREFIX = "umind-model"


def model_thread() -> ThreadPoolExecutor:
    """The one thread a process loads its model on and hands to BatchScheduler as `executor` (module docstring:
    where the model runs); the server keeps one for its life, `umind infer --parallel` one per run."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=MODEL_THREAD_PREFIX)


@dataclass
class _Ticket:
    jobs: list[Job]
    future: Future = field(default_factory=Future)


class BatchScheduler:
    def __init__(self, predictor: Predictor, window_ms: float = DEFAULT_WINDOW_MS, max_jobs: int | None = None,
                 idle_s: float = 5.0, regroup_ms: float = DEFAULT_REGROUP_MS, executor=None):
        if window_ms < 0:
            raise ValueError(f"window_ms must be 0 or more, got {window_ms}")
        if regroup_ms < 0:
            raise ValueError(f"regroup_ms must be 0 or more, got {regroup_ms}")
        self.predictor = predictor
        self.executor = executor  # where predict_many runs (anything with `submit`); None = the worker thread
        self.window_s = float(window_ms) / 1000.0
        self.regroup_s = float(regroup_ms) / 1000.0
        self._last_end: tuple[float, int] | None = None  # (when, callers answered + queued) of the last batch
        self._regrouped = 0  # batches held for callers expected back (`regroup_ms`)
        self._joined = 0  # callers that joined a running batch
        self.max_jobs = int(max_jobs or predictor.batch_size)
        self.idle_s = float(idle_s)
        self._queue: list[_Ticket] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._history: list[tuple[int, float]] = []  # (callers, seconds in the Predictor) of the last 1000 batches

    def run(self, jobs: Sequence[Job]) -> list[Result | PredictorError]:
        """Each job's Result, or the PredictorError that refused it; blocks until the batch holding them ran."""
        jobs = list(jobs)
        if not jobs:
            return []
        ticket = _Ticket(jobs)
        with self._cond:
            self._queue.append(ticket)
            self._cond.notify_all()
            if self._worker is None:
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

    @property
    def batches(self) -> list[int]:
        """Callers per recent batch, most recent last."""
        return [callers for callers, _ in self._history]

    def reset_stats(self) -> None:
        self._history, self._regrouped, self._joined = [], 0, 0

    def stats(self) -> dict:
        """How the recent batches were filled (the last 1000): what an operator tunes `window_ms` by."""
        recent = list(self._history)
        n = len(recent)
        return {"window_ms": self.window_s * 1000.0, "regroup_ms": self.regroup_s * 1000.0,
                "max_jobs": self.max_jobs, "batches": n,
                "mean_callers": round(sum(c for c, _ in recent) / n, 3) if n else None,
                "max_callers": max(c for c, _ in recent) if n else None,
                "mean_batch_s": round(sum(s for _, s in recent) / n, 4) if n else None,
                "regrouped": self._regrouped, "joined": self._joined}

    # ------------------------------------------------------------------ worker
    def _take(self) -> list[_Ticket] | None:
        """The tickets of the next batch, or None when the worker should end (idle too long)."""
        with self._cond:
            idle_until = time.monotonic() + self.idle_s
            while not self._queue:
                left = idle_until - time.monotonic()
                if left <= 0:
                    self._worker = None
                    return None
                self._cond.wait(left)
            now = time.monotonic()
            window_end, regroup_end, expected = now + self.window_s, now + self.regroup_s, self._expected(now)
            self._regrouped += len(self._queue) < expected
            while sum(len(t.jobs) for t in self._queue) < self.max_jobs:
                now = time.monotonic()
                left = (regroup_end if len(self._queue) < expected else window_end) - now
                if left <= 0:
                    break
                self._cond.wait(left)
            taken, count = [], 0
            while self._queue and (not taken or count + len(self._queue[0].jobs) <= self.max_jobs):
                ticket = self._queue.pop(0)
                taken.append(ticket)
                count += len(ticket.jobs)
            return taken

    def _expected(self, now: float) -> int:
        """How many callers to hold the next batch for: those the last batch answered in its last 2 x regroup_ms
        (the ones answered earlier have sent their next request already, or are not coming soon) plus those
        queued behind it, if it ended lately; else 1 (no wait), as when regrouping is off."""
        if self.regroup_s <= 0 or self._last_end is None or now - self._last_end[0] > 2.0 * self.regroup_s:
            return 1
        return max(1, self._last_end[1])

    def _loop(self) -> None:
        while True:
            tickets = self._take()
            if tickets is None:
                return
            t0 = time.perf_counter()
            delivery = self._serve(tickets)
            self._history = (self._history + [(len(delivery.tickets), time.perf_counter() - t0)])[-1000:]
            with self._cond:  # likely to ask next: callers answered lately, and those queued
                now = time.monotonic()
                recent = delivery.answered_since(now - 2.0 * self.regroup_s) if self.regroup_s > 0 else 0
                self._last_end = (now, min(self.max_jobs, recent + len(self._queue)))

    def _serve(self, tickets: list[_Ticket]) -> _Delivery:
        """Run the tickets' jobs as one `predict_many`; each caller is answered as soon as all its jobs are (a
        segment does not wait for the report that shares its batch), and callers queued meanwhile join the running
        batch where it has free rows (`_joiners`). A Predictor that hands nothing on early is answered from what it
        returns. Returns who was served."""
        delivery = _Delivery()
        calls = [call for ticket in tickets for call in delivery.add(ticket)]
        jobs = [job for t in tickets for job in t.jobs]

        def more(free: int) -> list[tuple[Job, object]]:
            return [offer for ticket in self._joiners(free) for offer in zip(ticket.jobs, delivery.add(ticket))]

        def on_answer(i: int, answer) -> None:
            calls[i](answer)

        try:
            if self.executor is None:
                returned = self.predictor.predict_many(jobs, on_answer=on_answer, more=more)
            else:
                returned = self.executor.submit(self.predictor.predict_many, jobs, on_answer=on_answer,
                                                more=more).result()
        except BaseException as exc:  # noqa: BLE001 - decided per caller below
            unanswered = delivery.unanswered()
            if len(delivery.tickets) == 1 and unanswered:
                tickets[0].future.set_exception(exc)
                return delivery
            for ticket in unanswered:  # no single input explains it: each caller alone, so only the culprit fails
                self._serve([ticket])
            return delivery
        for call, answer in zip(calls, returned):  # what was not handed on early (a second hand-on is ignored)
            call(answer)
        return delivery

    def _joiners(self, free: int) -> list[_Ticket]:
        """Queued callers whose jobs fit `free` rows of the running batch, taken off the queue in order."""
        taken = []
        with self._cond:
            while self._queue and len(self._queue[0].jobs) <= free:
                ticket = self._queue.pop(0)
                free -= len(ticket.jobs)
                taken.append(ticket)
            self._joined += len(taken)
        return taken


class _Delivery:
    """Who a batch serves: each job's answer goes to its caller's ticket, and a ticket's answers to the caller the
    moment all of them are in. Callers that join the running batch are added as they join."""

    def __init__(self):
        self.tickets: list[_Ticket] = []
        self.left: list[int] = []
        self.answered_at: list[float | None] = []
        self._answers: list[list] = []
        self._given: set[tuple[int, int]] = set()

    def add(self, ticket: _Ticket) -> list:
        """One answer callable per job of `ticket`."""
        k = len(self.tickets)
        self.tickets.append(ticket)
        self.left.append(len(ticket.jobs))
        self.answered_at.append(None)
        self._answers.append([None] * len(ticket.jobs))
        return [functools.partial(self._answer, k, j) for j in range(len(ticket.jobs))]

    def _answer(self, k: int, j: int, answer) -> None:
        if (k, j) in self._given:
            return
        self._given.add((k, j))
        self._answers[k][j] = answer
        self.left[k] -= 1
        if self.left[k] == 0:
            self.answered_at[k] = time.monotonic()
            self.tickets[k].future.set_result(self._answers[k])

    def unanswered(self) -> list[_Ticket]:
        return [t for k, t in enumerate(self.tickets) if self.left[k] > 0]

    def answered_since(self, since: float) -> int:
        """Callers answered at or after `since` (monotonic seconds)."""
        return sum(1 for at in self.answered_at if at is not None and at >= since)
