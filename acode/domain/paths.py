"""What a workspace path may be: the rule for paths in plans, in the model's tool calls and
in breadcrumbs, checked before anything uses them.

A path that no file system takes (a NUL byte, a name over 255 bytes, over PATH_MAX in
all) would otherwise fail half-way through a session; one with control characters or
bidirectional controls (U+202A-202E, U+2066-2069: "Trojan Source") shows a person another
name than the one acode writes to. Lengths count UTF-8 bytes, as the kernel does.

Pure.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "file_path_problem",
    "path_problem",
    "text_problem",
]

MAX_NAME_BYTES: Final = 255  # NAME_MAX of Linux, macOS and Windows file systems
MAX_PATH_BYTES: Final = 4095  # PATH_MAX (4096) less the terminating NUL

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_IN_LINES: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_BIDI: Final = re.compile(r"[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")
_SHOWN_CHARS: Final = 160


def text_problem(text: str, what: str = "text", *, lines: bool = False) -> str | None:
    """What makes ``text`` unfit to show a person or to write as UTF-8; None if nothing.
    ``lines`` accepts tabs and new lines, as in a message (never in a name)."""
    if "\0" in text:
        return f"{what} {_shown(text)} contains a NUL byte"
    if match := _SURROGATE.search(text):
        return f"{what} {_shown(text)} is not valid UTF-8 text ({_code(match.group())})"
    if match := (_CONTROL_IN_LINES if lines else _CONTROL).search(text):
        return f"{what} {_shown(text)} contains the control character {_code(match.group())}"
    if match := _BIDI.search(text):
        return (
            f"{what} {_shown(text)} contains {_code(match.group())}, a bidirectional control "
            "that shows the text in another order than it has"
        )
    return None


def path_problem(path: str) -> str | None:
    """What makes ``path`` unfit as a path inside the workspace (a file, a directory or a
    glob of them); None if nothing."""
    problem = text_problem(path, "path")
    if problem is not None:
        return problem
    if path.startswith("/"):
        return f"path {_shown(path)} is absolute; paths are relative to the workspace"
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        return f"path {_shown(path)} leads outside the workspace"
    size = len(path.encode("utf-8"))
    if size > MAX_PATH_BYTES:
        return (
            f"path {_shown(path)} is {size} bytes long; file systems take at most {MAX_PATH_BYTES}"
        )
    for name in path.split("/"):
        size = len(name.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            return (
                f"path {_shown(path)} has a name of {size} bytes; file systems take at most "
                f"{MAX_NAME_BYTES}"
            )
    return None


def file_path_problem(path: str) -> str | None:
    """``path_problem``, and a path that names the workspace itself, not a file in it."""
    problem = path_problem(path)
    if problem is None and posixpath.normpath(path) == ".":
        return f"path {_shown(path)} names the workspace itself, not a file in it"
    return problem


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"


def _shown(text: str) -> str:
    # repr escapes what it cannot print: control characters, bidirectional controls and
    # lone surrogates come out as \x1b, \u202e, \ud800, never as themselves.
    return repr(text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "...")
