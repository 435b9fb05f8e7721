"""``python -m acode``: the `acode` command, for when its script is not on PATH (an
engine run by a work session calls back into acode this way)."""

from acode.cli.entry import main

main()
