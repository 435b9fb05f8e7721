"""Questions asked on the terminal during resume: what to do about changed files."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from acode.cli.console import err_console, keyboard, out_console
from acode.cli.progress import quiet_screen
from acode.cli.views import changed_file_lines
from acode.engine.observer import Observer
from acode.engine.session import StrategyPrompt
from acode.engine.steps.base import InProgressStrategy
from acode.operations.inspection import read_store
from acode.resume.environment import diff_against_record, recorded_content
from acode.resume.service import ResumePreview
from acode.security.redaction import redact

__all__ = ["changed_files_prompt", "strategy_prompt"]


def changed_files_prompt(workspace: Path) -> Callable[[ResumePreview], bool]:
    """[C]ontinue / [A]bort / [V]iew changes; no terminal means abort."""

    def ask(preview: ResumePreview) -> bool:
        if not sys.stdin.isatty():
            return False
        from rich.prompt import Prompt

        console = out_console()
        assert preview.environment is not None  # asked about what it found
        # The whole report follows, with the resume, once the answer is to go on.
        for line in changed_file_lines(preview.environment, rest=True):
            console.print(line, markup=False)
        console.print("The session was working on these files. Changes may conflict.")
        while True:
            choice = Prompt.ask(
                "[C]ontinue anyway, [A]bort, [V]iew changes",
                choices=["c", "a", "v"],
                default="a",
                console=err_console(),
                stream=keyboard(),
            )
            if choice != "v":
                return choice == "c"
            _show_diffs(workspace, preview)

    return ask


def _show_diffs(workspace: Path, preview: ResumePreview) -> None:
    assert preview.environment is not None
    console = out_console()
    with read_store(workspace) as store:
        for change in preview.environment.changed:
            recorded = recorded_content(store, workspace, change)
            console.print(redact(diff_against_record(workspace, change, recorded)), markup=False)


def strategy_prompt(observer: Observer) -> StrategyPrompt:
    """--strategy prompt: the person decides what happens to an interrupted step, with
    the progress display out of the way while asked."""

    def ask(step_id: str, kind: str) -> InProgressStrategy | None:
        if not sys.stdin.isatty():
            return "rollback"
        from rich.prompt import Prompt

        with quiet_screen(observer):
            answer = Prompt.ask(
                f"Step {step_id!r} ({kind}) was interrupted half-way. [R]oll back and run "
                "again, run again as it is ([T]retry), or [S]top",
                choices=["r", "t", "s"],
                default="r",
                console=err_console(),
                stream=keyboard(),
            )
        return {"r": "rollback", "t": "retry"}.get(answer)  # type: ignore[return-value]

    return ask
