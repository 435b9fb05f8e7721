"""The rule of workspace paths (plans, tool calls, breadcrumbs)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acode.domain.paths import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    file_path_problem,
    path_problem,
    text_problem,
)


@pytest.mark.parametrize(
    "path", ["a.py", "src/a.py", "ünïcødé/файл.txt", "a b/c-d_e.f", "x" * 255, "d/" * 2000 + "f"]
)
def test_ordinary_paths_pass(path: str) -> None:
    assert path_problem(path) is None
    assert file_path_problem(path) is None


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("a\0b", "contains a NUL byte"),
        ("a\tb", "contains the control character U+0009"),
        ("a\x85b", "contains the control character U+0085"),
        ("a\u2028b", "contains the control character U+2028"),
        ("invoice\u202etxt.exe", "contains U+202E, a bidirectional control"),
        ("\u2067a", "contains U+2067"),
        ("a\ud800", "is not valid UTF-8 text (U+D800)"),
        ("/etc/passwd", "is absolute"),
        ("a/../../b", "leads outside the workspace"),
        ("é" * 128, "has a name of 256 bytes; file systems take at most 255"),
        ("d/" * 2048, "is 4096 bytes long; file systems take at most 4095"),
    ],
)
def test_what_no_file_system_takes_or_hides_a_name_is_refused(path: str, problem: str) -> None:
    found = path_problem(path)
    assert found is not None
    assert problem in found


def test_the_workspace_itself_is_no_file() -> None:
    assert path_problem("a/..") is None  # as a glob of run paths it may stand for all
    assert "names the workspace itself" in (file_path_problem("a/..") or "")


def test_a_long_path_is_shown_cut_and_escaped() -> None:
    problem = path_problem("\x1b" + "a" * 5000) or ""
    assert len(problem) < 300
    assert "\x1b" not in problem
    assert "\\x1b" in problem


def test_text_may_hold_lines_when_it_is_a_message() -> None:
    assert text_problem("two\nlines\tand a tab", lines=True) is None
    assert text_problem("two\nlines") is not None
    assert text_problem("bell\x07", lines=True) is not None


@given(st.text())
def test_an_accepted_path_holds_only_what_a_person_sees_as_it_is(path: str) -> None:
    if path_problem(path) is not None:
        return
    assert not path.startswith("/")
    assert len(path.encode()) <= MAX_PATH_BYTES
    assert all(len(name.encode()) <= MAX_NAME_BYTES for name in path.split("/"))
    for char in path:
        category = unicodedata.category(char)
        assert category not in ("Cc", "Cs"), ascii(char)
        assert unicodedata.bidirectional(char) not in ("LRE", "RLE", "LRO", "RLO", "PDF"), ascii(
            char
        )
        assert unicodedata.bidirectional(char) not in ("LRI", "RLI", "FSI", "PDI"), ascii(char)
