"""What an engine is told: at the start of a work session, on resume, and when its own
conversation is gone and the context must be rebuilt from the record."""

from __future__ import annotations

from acode.domain.work import Task, WorkSession

__all__ = ["rebuilt_prompt", "resume_prompt", "start_prompt"]


def _cookie_rules(wsession: WorkSession) -> list[str]:
    cookie = wsession.id
    return [
        f"Work session cookie: {cookie}",
        "Record each finding or decision as a breadcrumb, always with this cookie:",
        f"  acode wsession breadcrumb add --cookie {cookie} --message "
        '\'{"message": "what you found", "kind": "finding", "files": ["path"]}\'',
        "(plain text works too; a breadcrumb without the right cookie is rejected).",
    ]


def _task_lines(task: Task) -> list[str]:
    lines = [f"Task {task.id}: {task.title}"]
    if task.description:
        lines.append(task.description)
    return lines


def start_prompt(task: Task, wsession: WorkSession) -> str:
    lines = [f"You are starting work on task {task.id}.", *_task_lines(task), ""]
    lines += _cookie_rules(wsession)
    return "\n".join(lines)


def resume_prompt(task: Task, wsession: WorkSession) -> str:
    lines = [f"Resuming work session {wsession.id} on task {task.id}: {task.title}."]
    done = [s for s in wsession.subtasks if s.status == "completed"]
    if done:
        lines.append("Subtasks completed since:")
        lines += [f"- {s.task_id}: {s.summary}" for s in done]
    lines += ["", *_cookie_rules(wsession), "", "Continue the task."]
    return "\n".join(lines)


def rebuilt_prompt(task: Task, wsession: WorkSession) -> str:
    """A new engine session's first prompt, carrying what the lost one knew."""
    lines = [
        f"You are continuing work on task {task.id}, in a new conversation: the previous "
        "one is no longer available. This is what was recorded:",
        *_task_lines(task),
    ]
    if wsession.breadcrumbs:
        lines.append("Breadcrumbs, oldest first:")
        lines += [f"- {b.id} [{b.kind}] {b.message}" for b in wsession.breadcrumbs]
    if wsession.subtasks:
        lines.append("Subtasks:")
        lines += [
            f"- {s.task_id} ({s.status}): {s.summary or 'no summary yet'}"
            for s in wsession.subtasks
        ]
    lines += [
        "",
        *_cookie_rules(wsession),
        "",
        "Continue from where the previous session left off.",
    ]
    return "\n".join(lines)
