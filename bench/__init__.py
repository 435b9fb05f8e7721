"""Benchmarks of acode: ``python -m bench`` (what ``make bench`` runs).

It measures the cost of recording a step against a bare SQLite insert, the time to
load a long session for resume, and the database bytes per step, and writes the
numbers with the machine they were measured on to docs/benchmarks.md.
"""

from __future__ import annotations

__all__: list[str] = []
