"""Worker processes for large trees that end with the doctor: `run_parallel(func, items, jobs)`.

Unlike concurrent.futures, a worker dies with the doctor even when the doctor is killed with SIGKILL (so no
worker is left holding its stdout), Ctrl-C ends everything at once instead of after the queued work, and a
worker that dies costs only the item it was on: that item is tried once more in a fresh worker, then reported
as `Lost(reason)` while the rest of the run goes on. What a worker reads for an item (system/reads.py) comes
back with its result and counts as the doctor's own reads, so a run's answer can be kept whoever computed it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..model.util import record
from . import reads

# Workers are forked where the OS allows it (they start with the doctor's state, `func` included, nothing pickled)
FORKS = sys.platform.startswith("linux")
ATTEMPTS = 2  # an item whose worker died this many times while on it is lost
# A batch sent ahead to a busy worker waits in the pipe: it must fit there (with the batch before it, at start)
# or the doctor would block sending while the worker blocks sending it results.
AHEAD_BYTES = 16 * 1024
IDLE_DEATHS = 3  # workers dying before taking any item: starting more is pointless


@record
class Lost:
    """An item no result came back for: its worker process died on it (a crash in a C extension, the OOM killer,
    a signal from outside), twice."""

    reason: str


def run_parallel(
    func: Callable[[Any], Any],
    items: Iterable[Any],
    jobs: int,
    chunk: int = 0,
    meanwhile: Callable[[], Any] | None = None,
    weights: list[float] | None = None,
    groups: list[Any] | None = None,
    on_done: Callable[[], Any] | None = None,
) -> list[Any]:
    """`[func(item) for item in items]` in up to `jobs` worker processes, in order; an item whose worker died
    is a `Lost`. An exception raised by `func` ends every worker and is raised here, as a plain call would.
    At most `chunk` items go to a worker at a time (default: about four rounds per worker), fewer as the work
    runs out, so that the workers finish together. `weights` (each item's expected cost, e.g. its file's size)
    make the batches even in cost rather than in count: a batch of large files is not as long as a batch of
    small ones, which left one worker idle at the end while the other still had most of its last. Items go in
    order, so neighbours (a folder's scripts, which import the same modules) share a worker and its caches; with
    `groups` (each item's folder, say) a batch that reaches its cost runs on to the end of its group, up to twice
    its cost and count, so that a group is seldom split between two workers that would each read what its items
    import.
    `meanwhile()` runs here
    once the workers have their first batches (work of this process that needs no result: it would otherwise
    wait idle). `on_done()` runs here as each item's result arrives (a progress bar)."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        if meanwhile is not None:
            meanwhile()
        results = []
        for item in items:
            results.append(func(item))
            if on_done is not None:
                on_done()
        return results
    jobs = min(jobs, len(items))
    chunk = chunk or max(1, len(items) // (jobs * 4))
    if weights is not None and len(weights) != len(items):
        raise ValueError(f"{len(weights)} weights for {len(items)} items")
    if groups is not None and len(groups) != len(items):
        raise ValueError(f"{len(groups)} groups for {len(items)} items")
    return _Pool(func, items, jobs, chunk, weights, groups, on_done).run(meanwhile)


class _Worker:
    def __init__(self, context, func):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_serve, args=(func, child_conn, os.getpid()), daemon=True)
        self.process.start()
        child_conn.close()
        self.in_flight: deque[int] = deque()  # indexes sent and not answered, in the order the worker takes them
        self.batch_ends: deque[int] = deque()  # the last index of each batch sent and not finished
        self.took_any = False

    @property
    def batches(self) -> int:
        return len(self.batch_ends)


class _Pool:
    def __init__(
        self,
        func,
        items: list,
        jobs: int,
        chunk: int,
        weights: list[float] | None = None,
        groups: list[Any] | None = None,
        on_done: Callable[[], Any] | None = None,
    ):
        # fork: no re-import per worker, and the worker's parent is this thread (what PDEATHSIG watches)
        import multiprocessing  # here: a check of one script starts no worker and needs none of it (~10 ms)

        from . import supervisor  # noqa: F401 - loaded before the workers fork, so that none imports it again

        self.context = multiprocessing.get_context("fork" if FORKS else None)
        self.func = func
        self.items = items
        self.jobs = jobs
        self.results: list[Any] = [None] * len(items)
        self.chunk = chunk
        self.weights = weights if weights is not None else [1.0] * len(items)
        self.groups = groups
        self.queue: deque[int] = deque(range(len(items)))  # items not yet sent, in order
        self.queued_weight = float(sum(self.weights))
        # the most one batch carries: `chunk` items of the average cost
        self.batch_weight = self.queued_weight * chunk / len(items) if items else 0.0
        self.retries: deque[list[int]] = deque()  # batches given back by a worker that died, sent first
        self.deaths: dict[int, int] = {}
        self.idle_deaths = 0
        self.workers: list[_Worker] = []
        self.on_done = on_done

    @property
    def pending(self) -> bool:
        return bool(self.retries or self.queue)

    def _next_batch(self) -> list[int]:
        """A retried batch first; else the next items, about half of an even share of what is left, in cost
        (at most `chunk` items): large batches while there is much to do, single items at the end."""
        if self.retries:
            return self.retries.popleft()
        share = min(self.batch_weight, self.queued_weight / (2 * self.jobs))
        batch: list[int] = []
        carried = 0.0
        while self.queue and len(batch) < self.chunk and (not batch or carried + self.weights[self.queue[0]] <= share):
            index = self.queue.popleft()
            batch.append(index)
            carried += self.weights[index]
        groups = self.groups
        if groups is not None and batch:  # on to the end of the last item's group, within twice the share and count
            while (
                self.queue
                and groups[self.queue[0]] == groups[batch[-1]]
                and len(batch) < 2 * self.chunk
                and carried + self.weights[self.queue[0]] <= 2 * share
            ):
                index = self.queue.popleft()
                batch.append(index)
                carried += self.weights[index]
        self.queued_weight -= carried
        return batch

    def run(self, meanwhile: Callable[[], Any] | None = None) -> list[Any]:
        from multiprocessing.connection import wait

        try:
            self._hire()
            if meanwhile is not None:
                meanwhile()
            while self.pending or any(w.in_flight for w in self.workers):
                self._hire()
                if not self.workers:
                    break
                ready = wait([w.conn for w in self.workers] + [w.process.sentinel for w in self.workers])
                for worker in list(self.workers):
                    if worker.conn in ready or worker.process.sentinel in ready:
                        self._collect(worker)
        finally:
            self._end()
        return self.results

    def _hire(self) -> None:
        from multiprocessing.reduction import ForkingPickler

        while self.pending and len(self.workers) < self.jobs and self.idle_deaths < IDLE_DEATHS:
            self.workers.append(_Worker(self.context, self.func))
        for worker in self.workers:
            # a worker holds its batch and the next one, so it never waits for this process to send more (on a
            # busy machine the doctor may not be scheduled the moment a worker runs dry)
            while worker.batches < 2 and self.pending:
                batch = self._next_batch()
                payload = ForkingPickler.dumps([(i, self.items[i]) for i in batch])
                if worker.batches and len(payload) > AHEAD_BYTES:  # it could fill the pipe of a busy worker
                    self.retries.appendleft(batch)
                    break
                try:
                    worker.conn.send_bytes(payload)
                except OSError:  # it died since: _collect() sees it end; the batch goes to another worker
                    self.retries.appendleft(batch)
                    break
                worker.in_flight.extend(batch)
                worker.batch_ends.append(batch[-1])
                worker.took_any = True
        if self.idle_deaths >= IDLE_DEATHS and not self.workers:
            if self.pending:
                reads.not_cacheable("worker processes could not be started")  # (a passing failure: not kept)
            while self.pending:
                for i in self._next_batch():
                    self.results[i] = Lost("worker processes could not be started")

    def _collect(self, worker: _Worker) -> None:
        """Take the worker's answers; if it died, what it was on goes back in the queue, or is lost."""
        try:
            while worker.conn.poll():
                index, ok, value, recorded = worker.conn.recv()
                if not ok:
                    raise value
                reads.merge_worker_reads(recorded)  # what it read counts as this run's reads
                self.results[index] = value
                worker.in_flight.remove(index)
                if self.on_done is not None:
                    self.on_done()
                if worker.batch_ends and worker.batch_ends[0] == index:
                    worker.batch_ends.popleft()
            if worker.process.is_alive():
                return
        except (EOFError, OSError):
            pass
        worker.process.join(1.0)
        self.workers.remove(worker)
        worker.conn.close()
        if not worker.took_any:
            self.idle_deaths += 1
        if not worker.in_flight:
            return
        culprit = worker.in_flight.popleft()  # the worker takes its batch in order: it died on the first left
        self.deaths[culprit] = self.deaths.get(culprit, 0) + 1
        if self.deaths[culprit] >= ATTEMPTS:
            reads.not_cacheable("a worker process died")  # (what it read for that item never came back)
            self.results[culprit] = Lost(
                f"the worker process checking it died {ATTEMPTS} times (last: {_how(worker.process.exitcode)})"
            )
        else:
            self.retries.appendleft([culprit])
        if worker.in_flight:
            self.retries.appendleft(list(worker.in_flight))

    def _end(self) -> None:
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in self.workers:
            worker.process.join(1.0)
            worker.conn.close()
        self.workers.clear()


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "it stopped answering"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _serve(func, conn, parent_pid: int) -> None:
    """A worker: dies with the doctor, leaves Ctrl-C to it, never writes to its stdout (a report stream)."""
    from .supervisor import die_with_parent  # (here: it imports ctypes and subprocess, which one script never needs)

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a handler the doctor had is not the worker's
        signal.signal(sig, signal.SIG_DFL)
    stderr = _Noticing(sys.stderr)
    sys.stderr = stderr
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        for index, item in batch:
            said = stderr.said
            # each item's reads in a frame of their own, sent with its result (a forked worker records as the doctor
            # was recording when it forked)
            with reads.nested() as frame:
                try:
                    answer = (index, True, func(item))
                except Exception as exc:  # noqa: BLE001 - raised again in the doctor
                    answer = (index, False, exc)
            if frame is not None and stderr.said != said:  # a run that warned is not kept (run_answer.py)
                frame.unsafe = frame.unsafe or "a worker process wrote to stderr"
            recorded = reads.worker_frame_state(frame)
            try:
                conn.send((*answer, recorded))
            except Exception as exc:  # noqa: BLE001 - a result or an exception that does not pickle
                conn.send((index, False, RuntimeError(f"{type(exc).__name__}: {exc}"), recorded))


class _Noticing:
    """A worker's stderr: passes everything on, and counts that something was said."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.said = 0

    def write(self, text: str) -> int:
        self.said += 1
        return self.inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
