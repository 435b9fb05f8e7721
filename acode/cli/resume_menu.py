"""What interactive and preflight resumes show before they ask (docs/resume.md, "Interactive"):
the plan as it stands (done, in progress, remaining), the age and the risks, and the
options of a session whose history cannot be trusted."""

from __future__ import annotations

from pathlib import Path

from acode.cli.console import count, err_console, keyboard, out_console
from acode.domain.age import ago_text, judge_age
from acode.domain.plan import Plan, StepSpec, TaskSpec
from acode.errors import AcodeError, CheckpointError, ErrorCode
from acode.resume.service import ResumePreview

__all__ = [
    "ask_next",
    "ask_restart",
    "plan_lines",
    "risk_lines",
    "trouble_hint",
    "trouble_menu",
]

_IDS_SHOWN = 5  # step ids named on a task's line
_TASKS_SHOWN = 12  # remaining tasks listed; a long plan ends with a count


def _interrupted(preview: ResumePreview) -> str:
    seconds = preview.interrupted_s or 0
    return f"interrupted {ago_text(seconds)} ({judge_age(seconds).age.value})"


def plan_lines(preview: ResumePreview) -> list[str]:
    """The session's plan in a few lines: the tasks done, the step in progress and its
    action, and what remains; bounded whatever the plan's length."""
    row, s = preview.row, preview.summary
    lines = [f"Session {row.short_id}: {row.title}", f"  {s.state.value}, {_interrupted(preview)}"]
    plan, c = preview.plan, preview.continuation
    if plan is None or c is None:
        if preview.agent is not None:
            lines.append(f"  Task: {preview.agent.task}")
        lines.append(f"  ✓ Done: {count(s.steps_completed, 'step')} (skipped, from the record)")
        if s.current_step and s.steps_completed + s.steps_failed < s.next_position:
            lines.append(f"  ▸ In progress: {s.current_step}")
        lines.append("  · Remaining: what the model decides as it works")
        return lines + _warnings(preview)
    done_tasks = [n for n, t in enumerate(plan.tasks, 1) if t.id in c.skipped_tasks]
    if done_tasks:
        steps = sum(len(plan.tasks[n - 1].steps) for n in done_tasks)
        if len(done_tasks) == 1:
            task = plan.tasks[done_tasks[0] - 1]
            lines.append(f"  ✓ Done: Task {done_tasks[0]}: {task.title} ({count(steps, 'step')})")
        else:
            lines.append(f"  ✓ Done: {len(done_tasks)} tasks ({count(steps, 'step')})")
    remaining = {c.in_progress, *c.pending_steps}
    shown = 0
    for number, task in enumerate(plan.tasks, start=1):
        if task.id in c.skipped_tasks:
            continue
        if shown == _TASKS_SHOWN:
            left = [t for t in plan.tasks[number - 1 :] if t.id not in c.skipped_tasks]
            rest = sum(len(t.steps) for t in left)
            lines.append(f"  · ... and {len(left)} more tasks ({count(rest, 'step')})")
            break
        shown += 1
        lines.append(_task_line(number, task, remaining, c.in_progress, c.in_progress_action))
    return lines + _warnings(preview)


def _warnings(preview: ResumePreview) -> list[str]:
    """What changed since the session stopped, in a line each: the questions that follow
    (and [V]iew details) show the rest."""
    env = preview.environment
    if env is None:
        return []
    lines = [f"  ✗ {problem}" for problem in env.problems()]
    if env.changed:
        files = ", ".join(f"{c.path} ({c.change.value.lower()})" for c in env.changed[:_IDS_SHOWN])
        more = f" and {len(env.changed) - _IDS_SHOWN} more" if len(env.changed) > _IDS_SHOWN else ""
        lines.append(f"  ✗ Changed since it stopped: {files}{more}")
    if env.config:
        lines.append("  ✗ Configuration changed: " + ", ".join(c.key for c in env.config))
    return lines


def _task_line(
    number: int,
    task: TaskSpec,
    remaining: set[str | None],
    in_progress: str | None,
    action: str | None,
) -> str:
    done = [s for s in task.steps if s.id not in remaining]
    todo = [s for s in task.steps if s.id in remaining and s.id != in_progress]
    parts = []
    if done:
        parts.append(f"{len(done)} of {len(task.steps)} steps done")
    if any(s.id == in_progress for s in task.steps):
        parts.append(f"in progress: {in_progress} ({action})")
    if todo:
        parts.append(f"remaining: {_ids(todo)}")
    mark = "▸" if done or in_progress in {s.id for s in task.steps} else "·"
    return f"  {mark} Task {number}: {task.title}: " + "; ".join(parts)


def _ids(steps: list[StepSpec]) -> str:
    names = ", ".join(s.id for s in steps[:_IDS_SHOWN])
    more = f" and {len(steps) - _IDS_SHOWN} more" if len(steps) > _IDS_SHOWN else ""
    return f"{names}{more}"


def ask_next() -> str:
    """r(esume), s(tart over), v(iew details) or a(bort)."""
    from rich.prompt import Prompt

    return Prompt.ask(
        "[R]esume, [S]tart over from scratch, [V]iew details, [A]bort",
        choices=["r", "s", "v", "a"],
        default="r",
        console=err_console(),
        stream=keyboard(),
    )


def ask_restart(preview: ResumePreview) -> bool:
    from rich.prompt import Confirm

    what = "its plan again from the first step" if preview.plan else "its task again"
    return Confirm.ask(
        f"Discard session {preview.row.short_id} (its history stays) and run {what}, on the "
        "files as they are now?",
        default=False,
        console=err_console(),
        stream=keyboard(),
    )


def risk_lines(preview: ResumePreview) -> list[str]:
    """Preflight's age and risk section: how old, what changed, what the in-progress
    step will do, what a rollback will revert."""
    seconds = preview.interrupted_s or 0
    age = judge_age(seconds)
    lines = ["Age and risk:", f"  Interrupted: {ago_text(seconds)} ({age.age.value})"]
    if age.advice:
        lines.append(f"    {age.advice}")
    env = preview.environment
    if env is not None:
        changed = [f"{c.path} ({c.change.value.lower()})" for c in env.changed]
        lines.append(f"  Changed files: {', '.join(changed) if changed else 'none'}")
        config = [f"{c.key}: {c.recorded!r} -> {c.current!r}" for c in env.config]
        lines.append(f"  Configuration changes: {', '.join(config) if config else 'none'}")
    c = preview.continuation
    step = _step(preview.plan, c.in_progress if c else None)
    if c is None or step is None:
        lines.append("  In progress: no step")
        return lines
    lines.append(f"  In progress: {step.id}: {step.title} -> {c.in_progress_action}")
    lines.append(f"  A rollback will: {_rollback(preview, step)}")
    return lines


def _step(plan: Plan | None, step_id: str | None) -> StepSpec | None:
    if plan is None or step_id is None:
        return None
    return next((s for s in plan.steps() if s.id == step_id), None)


def _rollback(preview: ResumePreview, step: StepSpec) -> str:
    env = preview.environment
    rollback = env.rollback if env is not None else None
    if rollback is not None:
        what = [f"put back {p}" for p in rollback.revert] + [f"delete {p}" for p in rollback.delete]
        kept = [p for p, _ in rollback.kept]
        text = "; ".join(what) if what else "revert nothing"
        return text + (f"; keep as they are: {', '.join(kept)}" if kept else "")
    action = (preview.continuation.in_progress_action or "") if preview.continuation else ""
    if "rollback" in action and step.paths:
        return f"restore {', '.join(step.paths)} from the snapshot taken before the step"
    if "pre/post" in action:
        return (
            f"put {step.target} back to its recorded content if it holds neither the old nor "
            "the new one"
        )
    return "revert nothing (the step runs again)"


_UNTRUSTED = {ErrorCode.CHECKPOINT_INVALID, ErrorCode.CHAIN_BROKEN, ErrorCode.KEY_CHANGED}


def trouble_hint(error: AcodeError, short: str) -> AcodeError:
    """A session whose history cannot be trusted (ACODE-CKPT-*): its options added to
    the hint. Anything else is returned as it is."""
    if not isinstance(error, CheckpointError) or error.code not in _UNTRUSTED:
        return error
    options = [
        f"check all of it from its first event: acode resume --dry-run --verify {short}",
        f"read it: acode session history {short}",
        f"export what can be read: acode session export {short} --format json -o {short}.json",
    ]
    if error.code is not ErrorCode.KEY_CHANGED:
        options.append(f"give it up, its history kept: acode session discard {short}")
    hint = (error.hint + "; " if error.hint else "") + "options: " + "; ".join(options)
    return CheckpointError(error.message, hint=hint, code=error.code)


def trouble_menu(workspace: Path, session_id: str, short: str, error: AcodeError) -> int:
    """Interactive: what to do with a session that cannot be trusted, asked until the
    person discards it or stops. Returns the exit status."""
    from rich.prompt import Prompt

    from acode.cli import inspect
    from acode.cli.console import render_error

    render_error(error)
    discard = error.code is not ErrorCode.KEY_CHANGED
    choices = ["v", "h", "e", *(["d"] if discard else []), "a"]
    question = "[V]erify from the first event, [H]istory, [E]xport what can be read, " + (
        "[D]iscard, [A]bort" if discard else "[A]bort"
    )
    while True:
        answer = Prompt.ask(
            question, choices=choices, default="a", console=err_console(), stream=keyboard()
        )
        try:
            if answer == "v":
                from acode.resume.service import preview_resume

                preview_resume(session_id, workspace, verify=True)
                out_console().print("Its whole history verifies now.")
            elif answer == "h":
                inspect.session_history(workspace, session_id, False)
            elif answer == "e":
                name = Prompt.ask(
                    "Export to", default=f"{short}.json", console=err_console(), stream=keyboard()
                )
                inspect.session_export(workspace, session_id, "json", Path(name), force=False)
            elif answer == "d":
                inspect.session_discard(workspace, session_id, False)
                return 0
            else:
                return error.exit_code
        except AcodeError as failed:
            render_error(failed)
