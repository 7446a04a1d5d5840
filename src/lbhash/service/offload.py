"""Worker threads that run a request's blocking part off the event loop, with one handoff each way.

`run_in_executor`'s futures and callbacks held the GIL for about a sixth of the service's time
under load; here a job is a tuple on a queue and its answer one `call_soon_threadsafe`
(docs/results/search-benchmarks.md, "The service's own cost").
"""

from __future__ import annotations

import asyncio
import queue
import threading

from lbhash.cpus import usable_cpus


class Offload:
    """`await offload.run(fn, *args)`: fn(*args) in one of `threads` daemon threads, started on
    first use; `close()` stops them once the jobs queued before it are done."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or min(32, usable_cpus() + 4)  # run_in_executor's default, over the usable CPUs
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._start = threading.Lock()

    async def run(self, fn, *args):
        if not self._workers:
            self._start_workers()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._jobs.put((loop, done, fn, args))
        return await done

    def close(self) -> None:
        with self._start:
            workers, self._workers = self._workers, []
        for _ in workers:
            self._jobs.put(None)
        for worker in workers:
            worker.join()

    def _start_workers(self) -> None:
        with self._start:
            while len(self._workers) < self.threads:
                worker = threading.Thread(target=self._work, name=f"lbhash-offload-{len(self._workers)}", daemon=True)
                worker.start()
                self._workers.append(worker)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, done, fn, args = job
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request, which re-raises it
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(settle, done, result, error)
            except RuntimeError:  # the loop closed while the job ran: nobody awaits it any more
                pass


def settle(done: asyncio.Future, result, error) -> None:
    """Hand a job's result or error to the request awaiting `done` (on its event loop)."""
    if done.cancelled():  # the client went away
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)
