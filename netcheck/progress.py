"""Progress bars for long work (rich), as a callback ``advance(done, total)``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """Show a progress bar on stderr; yields ``advance(done, total)`` to update it."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(done: int, new_total: int) -> None:
            bar.update(task, completed=done, total=new_total)

        yield advance
