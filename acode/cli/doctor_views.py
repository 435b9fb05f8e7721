"""``acode doctor``'s output: a table of checks, each fix under its check, or JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from acode.cli.console import cells, emit_json, out_console

if TYPE_CHECKING:
    from acode.operations.doctor import Check


def print_checks(checks: list[Check], as_json: bool) -> None:
    from acode.operations.doctor import failed

    if as_json:
        emit_json({"ok": not failed(checks), "checks": [asdict(c) for c in checks]})
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column(Text("STATUS"), no_wrap=True)
    table.add_column(Text("CHECK"), no_wrap=True)
    # Paths and messages fold within the width left: the table fits 80 columns.
    table.add_column(Text("DETAIL"), overflow="fold", ratio=1)
    for check in checks:
        table.add_row(*cells(check.status.value, check.name, check.detail))
        if check.fix:
            table.add_row(*cells("", "", f"fix: {check.fix}"))
    out_console().print(table)
