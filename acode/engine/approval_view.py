"""What an approval gates: shown to the person who decides, and bound into the decision.

An approve step in a plan gates the step after it. Before anyone is asked, acode works
out what that step will do: the diff a commit will record, the command a run step runs,
the change a write or edit makes to its file, or the step itself for the other kinds.
That text is the approval's subject, so the signed decision covers the hash of exactly
what was shown. When the work tree changes, the text changes, and a decision made on the
old text no longer applies.

The text is kept as it is here. Secrets in it are masked only where it is shown, so a
change that the mask would hide still changes the hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acode.domain.kinds import StepKind
from acode.domain.plan import StepSpec
from acode.domain.textdiff import unified_diff
from acode.errors import AcodeError, StepFailedError, UsageError
from acode.system.files import sha256_bytes
from acode.system.git import commit_preview, is_work_tree

__all__ = [
    "GatedView",
    "approval_subject",
    "changed_since_shown",
    "gated_view",
    "view_of",
]

# The format of a subject made here; a subject of another shape (the agent's plan, a
# library user's object) is not a view and is shown as its question alone.
_VERSION = 1
_SUBJECT_KEYS = {"v", "step", "heading", "text", "files"}


@dataclass(frozen=True)
class GatedView:
    """The step an approval gates (as a plan file writes it), a sentence that says what
    it will do, and the text that shows it (a diff, a command, the step). ``files``: the
    workspace files it changes, where that is known."""

    step: dict[str, Any]
    heading: str
    text: str
    files: tuple[str, ...] = ()

    def subject(self) -> dict[str, Any]:
        """The approval's subject: everything shown."""
        return {
            "v": _VERSION,
            "step": self.step,
            "heading": self.heading,
            "text": self.text,
            "files": list(self.files),
        }


def approval_subject(workspace: Path, gated: StepSpec | None) -> dict[str, Any] | None:
    """What an approval of ``gated`` is bound to: the step and all that is shown of it.
    An approval that gates nothing (the last step of a plan) keeps the subject it had
    before views, None, so that decisions recorded then still apply."""
    return None if gated is None else gated_view(workspace, gated).subject()


def view_of(subject: object) -> GatedView | None:
    """The view a subject made here holds; None for a subject of any other shape."""
    if not isinstance(subject, dict) or subject.keys() != _SUBJECT_KEYS or subject["v"] != _VERSION:
        return None
    return GatedView(
        step=subject["step"],
        heading=subject["heading"],
        text=subject["text"],
        files=tuple(subject["files"]),
    )


def changed_since_shown(workspace: Path, subject: object) -> GatedView | None:
    """What the approval gates now, when that differs from what ``subject`` showed; None
    while it is the same (and for a subject that is not a view)."""
    shown = view_of(subject)
    if shown is None:
        return None
    now = gated_view(workspace, StepSpec.from_dict(shown.step, task_id=""))
    return None if now == shown else now


def gated_view(workspace: Path, gated: StepSpec) -> GatedView:
    """What ``gated`` will do in ``workspace`` as things stand now."""
    step = gated.to_dict()
    name = f"The {gated.kind.value} step {gated.id!r} that follows"
    try:
        match gated.kind:
            case StepKind.COMMIT:
                return _commit(workspace, step, name)
            case StepKind.RUN:
                return GatedView(
                    step=step, heading=f"{name} will run this command:", text=gated.target
                )
            case StepKind.WRITE | StepKind.EDIT:
                return _file_change(workspace, gated, step, name)
    except (StepFailedError, UsageError, OSError) as cannot:
        reason = cannot.message if isinstance(cannot, AcodeError) else str(cannot)
        heading = f"{name} cannot run as things stand: {reason}"
        return GatedView(step=step, heading=heading, text=_step_text(step))
    return GatedView(step=step, heading=f"{name}:", text=_step_text(step))


def _commit(workspace: Path, step: dict[str, Any], name: str) -> GatedView:
    if not is_work_tree(workspace):
        raise StepFailedError(f"{workspace} is not a git work tree")
    diff, files = commit_preview(workspace)
    if not diff:
        return GatedView(
            step=step, heading=f"{name} will make an empty commit: nothing changed.", text=""
        )
    noun = "file" if len(files) == 1 else "files"
    heading = f"{name} will commit these changes to {len(files)} {noun} (diff against HEAD):"
    return GatedView(step=step, heading=heading, text=diff, files=files)


def _file_change(workspace: Path, gated: StepSpec, step: dict[str, Any], name: str) -> GatedView:
    # The step's own code says what it will write, so the view cannot drift from it.
    from acode.engine.steps.file_steps import EditStep, WriteStep, read_in_workspace

    path = gated.target
    action = (
        WriteStep(path, (gated.content or "").encode())
        if gated.kind is StepKind.WRITE
        else EditStep(path, gated.old or "", gated.new or "")
    )
    before = read_in_workspace(workspace, path)
    after = action.new_content(before)
    if before == after:
        return GatedView(
            step=step,
            heading=f"{name} leaves {path} as it is (the same content).",
            text="",
            files=(),
        )
    verb = "create" if before is None else "change"
    return GatedView(
        step=step,
        heading=f"{name} will {verb} {path}:",
        text=_file_diff(path, before, after),
        files=(path,),
    )


def _file_diff(path: str, before: bytes | None, after: bytes) -> str:
    if (before is not None and b"\0" in before) or b"\0" in after:
        return f"Binary file {path}: {_describe(before)} -> {_describe(after)}\n"
    return (
        unified_diff(
            _text(before), _text(after), "/dev/null" if before is None else f"a/{path}", f"b/{path}"
        )
        or f"{path}: created empty\n"
    )


def _describe(data: bytes | None) -> str:
    return "absent" if data is None else f"{len(data)} bytes, sha256 {sha256_bytes(data)}"


def _text(data: bytes | None) -> str:
    # backslashreplace: bytes that are not UTF-8 stay distinct (and visible) in the text
    # the approval's hash covers.
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def _step_text(step: dict[str, Any]) -> str:
    """The step as lines of ``key: value``, a value of several lines as a block."""
    lines = []
    for key, value in step.items():
        text = str(value)
        if "\n" in text:
            lines.append(f"{key}: |")
            lines.extend(f"  {line}" for line in text.splitlines())
        else:
            lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"
