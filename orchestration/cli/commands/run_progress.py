"""Progress of ``aitb run`` on stderr: one step per runner message (bring-up, RTT probes,
each workload, teardown, analysis), each shown with a spinner and its elapsed time on a
terminal, as plain timestamped lines otherwise (a log file, the VM's console)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["StepProgress"]


class StepProgress:
    """Callable progress sink: ``step(message)`` closes the previous step and opens a new
    one. Use as a context manager; ``quiet`` shows nothing."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self.t0 = time.monotonic()
        self.live = console.is_terminal and not quiet
        self.bar = Progress(SpinnerColumn(finished_text="[green]✓[/]"),
                            TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=console, transient=False,
                            redirect_stdout=False) if self.live else None
        self.task: TaskID | None = None

    def __enter__(self) -> StepProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish()
        if self.bar is not None:
            self.bar.stop()

    def _finish(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, total=1, completed=1)
            self.bar.stop_task(self.task)
        self.task = None

    def __call__(self, message: str) -> None:
        """Start step ``message`` (the previous one is done)."""
        if self.quiet:
            return
        self._finish()
        if self.bar is not None:
            self.task = self.bar.add_task(escape(message), total=None)
        else:
            self.console.print(f"[dim]{time.monotonic() - self.t0:7.1f}s[/] {escape(message)}",
                               highlight=False, soft_wrap=True)
