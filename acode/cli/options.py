"""The options and arguments that commands share, declared once: every command's
``--workspace`` and ``--json`` read alike, and its ``--help`` says the same of them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["JsonOption", "RecentSessionArgument", "SessionArgument", "WorkspaceOption"]

WorkspaceOption = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace directory (default: the nearest parent holding .agent/, else the "
        "current directory).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
SessionArgument = Annotated[str, typer.Argument(help="Session id or a unique prefix of it.")]
RecentSessionArgument = Annotated[
    str | None, typer.Argument(help="Session id or prefix (default: the most recent).")
]
