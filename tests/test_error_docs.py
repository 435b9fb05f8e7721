"""docs/errors.md is the list a person looks a code up in: every code acode can print
has a row there, with the exit status its error class returns."""

from __future__ import annotations

import re
from pathlib import Path

from acode.errors import AcodeError, ErrorCode

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
_ROW = re.compile(r"^\| (ACODE-[A-Z]+-\d{3}) \| (\d+) \|", re.MULTILINE)


def _documented() -> dict[str, set[int]]:
    rows: dict[str, set[int]] = {}
    for code, status in _ROW.findall(DOC.read_text(encoding="utf-8")):
        rows.setdefault(code, set()).add(int(status))
    return rows


def _error_classes() -> list[type[AcodeError]]:
    found, todo = [], [AcodeError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_code_has_a_row() -> None:
    assert sorted(set(ErrorCode) - _documented().keys()) == []


def test_every_error_class_has_its_exit_status_in_its_codes_rows() -> None:
    rows = _documented()
    wrong = [
        (cls.__name__, cls.code.value, cls.exit_code)
        for cls in _error_classes()
        if cls is not AcodeError and cls.exit_code not in rows[cls.code.value]
    ]
    assert wrong == []
