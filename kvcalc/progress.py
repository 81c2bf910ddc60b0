"""A progress bar for `kvcalc run` on stderr: the runner's start/advance hooks, shown once a run has taken a second."""

from __future__ import annotations


class BarHooks:
    """The runner's progress hooks on a rich progress bar (stderr), shown once the run has taken a second."""

    def __init__(self):
        import threading
        import time

        self.clock, self.started, self.bar, self.tasks = time.perf_counter, time.perf_counter(), None, {}
        self.lock = threading.Lock()  # prefill threads advance the bar too

    def start(self, name: str, total: int) -> None:
        self.tasks[name] = [total, 0, None]
        self._show()

    def advance(self, name: str) -> None:
        with self.lock:
            self.tasks[name][1] += 1
            self._show()

    def _show(self) -> None:
        if self.bar is None and self.clock() - self.started > 1.0:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
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
