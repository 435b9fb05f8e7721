"""Progress of a running session: a Rich display on a terminal, one plain line per
step otherwise, JSON lines with --json."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from acode.cli.console import emit_json, err_console, out_console
from acode.cli.sync_views import notice_json, notice_text
from acode.engine.observer import Observer, StepNotice, StepPhase
from acode.security.redaction import redact

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from acode.sync.notices import SyncNotice

__all__ = ["JsonObserver", "PlainObserver", "RichObserver", "choose_observer", "quiet_screen"]

_MARKS = {
    StepPhase.DONE: ("✓", "green"),
    StepPhase.SKIPPED: ("↷", "dim"),
    StepPhase.RECOVERED: ("✓", "cyan"),
    StepPhase.ROLLED_BACK: ("↺", "yellow"),
    StepPhase.FAILED: ("✗", "red"),
}


def _counter(n: StepNotice) -> str:
    total = f"/{n.total}" if n.total else ""
    return f"[{n.position + 1}{total}]"


def _line(n: StepNotice) -> str:
    where = f"{n.task_id} > " if n.task_id else ""
    text = f"{_counter(n)} {where}{n.step_id}: {n.title}"
    if n.duration_ms is not None:
        text += f" ({n.duration_ms / 1000:.1f}s)"
    if n.detail:
        text += f" — {redact(n.detail)}"
    return text


class PlainObserver:
    """One line per finished step, for logs and pipes."""

    def on_step(self, notice: StepNotice) -> None:
        # Skipped steps were reported when they ran; resume prints their count instead.
        if notice.phase in (StepPhase.STARTED, StepPhase.SKIPPED):
            return
        mark = _MARKS[notice.phase][0]
        out_console().print(f"  {mark} {_line(notice)}", markup=False, highlight=False)

    def on_sync(self, notice: SyncNotice) -> None:
        """Called from the sync worker's thread; one line on stderr."""
        err_console().print(notice_text(notice), markup=False, highlight=False)


class JsonObserver:
    def on_step(self, notice: StepNotice) -> None:
        record: dict[str, Any] = {
            "event": "step",
            "phase": notice.phase.value,
            "position": notice.position,
            "step": notice.step_id,
            "task": notice.task_id,
            "kind": notice.kind,
            "title": notice.title,
        }
        if notice.total is not None:
            record["total"] = notice.total
        if notice.detail:
            record["detail"] = redact(notice.detail)
        if notice.duration_ms is not None:
            record["duration_ms"] = notice.duration_ms
        emit_json(record)

    def on_sync(self, notice: SyncNotice) -> None:
        emit_json(notice_json(notice))


class RichObserver:
    """Finished steps scroll above a live bar with counters, the current step and the
    elapsed time."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress: Progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", style="bold"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out_console(),
            transient=True,
        )
        self._task: TaskID = self._progress.add_task("starting", total=None)
        self._live = False

    def on_step(self, notice: StepNotice) -> None:
        p = self._progress
        if not self._live:
            # Drawn from the first step on, so nothing shows if opening the session fails.
            p.update(self._task, total=notice.total)
            p.start()
            self._live = True
        if notice.phase is StepPhase.STARTED:
            # Masked before it is cut: a secret cut short no longer has a shape to find.
            p.update(self._task, description=redact(f"{notice.step_id}: {notice.title}")[:60])
            return
        if notice.phase is not StepPhase.SKIPPED:
            mark, colour = _MARKS[notice.phase]
            p.console.print(f"  [{colour}]{mark}[/] {_escape(_line(notice))}")
        if notice.phase in (StepPhase.DONE, StepPhase.RECOVERED, StepPhase.SKIPPED):
            p.advance(self._task)

    def on_sync(self, notice: SyncNotice) -> None:
        """Above the live bar (the console serialises writes from the worker's thread)."""
        self._progress.console.print(f"[yellow]{_escape(notice_text(notice))}[/]")

    def stop(self) -> None:
        if self._live:
            self._progress.stop()
            self._live = False

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Take the live display off the screen while a question is asked."""
        was_live = self._live
        self.stop()
        try:
            yield
        finally:
            if was_live:
                self._progress.start()
                self._live = True


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def choose_observer(as_json: bool) -> Observer:
    if as_json:
        return JsonObserver()
    if out_console().is_terminal:
        return RichObserver()
    return PlainObserver()


def quiet_screen(observer: Observer) -> AbstractContextManager[None]:
    """A context in which the terminal is free for a prompt."""
    return observer.suspended() if isinstance(observer, RichObserver) else nullcontext()
