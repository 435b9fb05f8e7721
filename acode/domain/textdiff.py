"""Unified diffs of texts, for people: what a file became, what a step would change."""

from __future__ import annotations

__all__ = ["NO_NEWLINE", "unified_diff"]

# git's marker for a last line without a line break: without it the diff would glue that
# line to the next one and hide where the file ends.
NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(before: str, after: str, from_label: str, to_label: str) -> str:
    """The unified diff (3 lines of context) from ``before`` to ``after``; "" when they
    are equal."""
    import difflib  # only a person reviewing a change asks for it

    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=from_label,
        tofile=to_label,
    )
    return "".join(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}" for line in lines)
