"""Progress bars on stderr, shown once the work has taken a second: the runner's start/advance hooks (`kvcalc run`)
and a sweep's rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class BarHooks:
    """The runner's progress hooks on a rich progress bar (stderr), shown once the run has taken a second."""

    def __init__(self, redirect: bool = True) -> None:
        import threading
        import time

        self.clock, self.started = time.perf_counter, time.perf_counter()
        self.bar: Any = None  # a rich Progress, once shown
        self.tasks: dict[str, list] = {}  # name -> [total, done, the bar's task id]
        self.redirect = redirect  # rich's redirection of print() above the bar; off where stdout is being written
        self.lock = threading.Lock()  # prefill threads advance the bar too

    def start(self, name: str, total: int) -> None:
        self.tasks[name] = [total, 0, None]
        self._show()

    def advance(self, name: str, steps: int = 1) -> None:
        with self.lock:
            self.tasks[name][1] += steps
            self._show()

    def _show(self) -> None:
        if self.bar is None and self.clock() - self.started > 1.0:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True, redirect_stdout=self.redirect,
                                redirect_stderr=self.redirect)
            self.bar.start()
        if self.bar is not None:
            for name, task in self.tasks.items():
                if task[2] is None:
                    task[2] = self.bar.add_task(name, total=task[0])
                self.bar.update(task[2], completed=task[1])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class progress_hooks:
    """A context manager giving BarHooks on a terminal unless --quiet, else None (the runner stays silent)."""

    def __init__(self, quiet: bool):
        import sys

        self.hooks = None if quiet or not sys.stderr.isatty() else BarHooks()

    def __enter__(self):
        return self.hooks

    def __exit__(self, *exc):
        if self.hooks is not None:
            self.hooks.close()
        return False


def progress_rows(rows: Iterator[dict], total: int, to_terminal: bool, every: int = 1000) -> Iterator[dict]:
    """`rows`, with a bar of them on a terminal's stderr once they have taken a second (advanced every `every` rows);
    not where they are written to a terminal (`to_terminal`): the rows coming are the progress there."""
    import sys

    if total <= every or not sys.stderr.isatty() or to_terminal:
        yield from rows
        return
    hooks = BarHooks(redirect=False)  # stdout is being written: rich must leave it alone
    hooks.start("rows", total)
    try:
        for i, row in enumerate(rows, 1):
            yield row
            if i % every == 0:
                hooks.advance("rows", every)
    finally:
        hooks.close()
