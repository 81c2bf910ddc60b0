"""Independent pieces of a prefill on every core: worker threads, each with a single BLAS thread.

NumPy's elementwise work (the softmax's exp and sums) runs on one core, and a multithreaded BLAS keeps its idle
workers spinning between products, so a prefill that alternates products and softmaxes leaves a core mostly
idle. Worker threads that each attend a share of the heads with a one-thread BLAS use every core for both.
This needs control over the BLAS thread count (threadpoolctl); without it the pieces run one after another.
The limit is process-wide while the pieces run: another thread of a host program calling BLAS meanwhile runs one
BLAS thread too.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import lru_cache


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def _blas_controller():
    """threadpoolctl's view of the BLAS NumPy loaded, or None when there is none it can set (or no threadpoolctl)."""
    import numpy  # noqa: F401  (threadpoolctl sees only libraries already loaded)

    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    blas = ThreadpoolController().select(user_api="blas")
    return blas if blas.lib_controllers else None


def usable_workers(requested: int) -> int:
    """Threads a prefill can use: `requested`, or 1 when the BLAS thread count cannot be set (the threads would
    then each run a multithreaded BLAS, which oversubscribes the cores and is slower than one thread)."""
    return requested if requested <= 1 or _blas_controller() is not None else 1


@contextmanager
def one_blas_thread():
    """Within: BLAS runs one thread per caller. Yields False (and changes nothing) when that cannot be set."""
    blas = _blas_controller()
    if blas is None:
        yield False
        return
    with blas.limit(limits=1):
        yield True


_watchers: list[list[int]] = []  # what `threads_used` blocks watch: the most threads a run_tasks call ran on


@contextmanager
def threads_used():
    """Within: a one-element list holding the most threads any run_tasks call ran on (1 when none ran more), which
    is what a report says ran: the tasks can be fewer than the threads asked for, and a BLAS whose thread count
    cannot be set runs them on one."""
    seen = [1]
    _watchers.append(seen)
    try:
        yield seen
    finally:
        _watchers.remove(seen)


def run_tasks(work, tasks: list, workers: int, scratch) -> None:
    """work(task, buffer) for every task, on up to `workers` threads; `scratch()` makes each thread's buffer.

    The tasks must be independent (disjoint outputs). A failure in one stops the others at their next task and
    is raised here; so is a KeyboardInterrupt in the caller.
    """
    workers = min(workers, len(tasks))
    if workers > 1:
        with one_blas_thread() as limited:
            if limited:
                for seen in _watchers:
                    seen[0] = max(seen[0], workers)
                _in_threads(work, tasks, workers, scratch)
                return
    buffer = scratch()
    for task in tasks:
        work(task, buffer)


def _in_threads(work, tasks: list, workers: int, scratch) -> None:
    local, stop = threading.local(), threading.Event()

    def one(task):
        if stop.is_set():
            return
        if not hasattr(local, "buffer"):
            local.buffer = scratch()
        work(task, local.buffer)

    with ThreadPoolExecutor(workers, thread_name_prefix="kvcalc-prefill") as pool:
        futures = [pool.submit(one, task) for task in tasks]
        try:
            for future in futures:
                future.result()
        except BaseException:
            from kvcalc.backend.ops import ABORT

            stop.set()
            ABORT.set()  # the running tasks stop at their next product piece (ops.product)
            for future in futures:
                future.cancel()
            wait(futures)
            ABORT.clear()
            raise
