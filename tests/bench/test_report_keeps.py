"""A full benchmark run rewrites docs/benchmarks.md from what it measured, and keeps the
one section written by hand ("Figures behind design choices"): it is no measurement of
the run, and would otherwise be lost at every `make bench`."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import HAND_WRITTEN, _keep_hand_written

PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_the_hand_written_section_survives_a_new_report() -> None:
    old = f"# Benchmarks\n\nold\n\n## A\n\na\n\n{HAND_WRITTEN}\n\n- why\n\n## Method\n\nm\n"
    new = "# Benchmarks\n\nnew\n\n## A\n\nb\n\n## Method\n\nn\n"
    assert _keep_hand_written(new, old) == f"{new}\n{HAND_WRITTEN}\n\n- why\n"


def test_the_last_section_is_kept_to_the_end_of_the_page() -> None:
    old = f"# Benchmarks\n\n{HAND_WRITTEN}\n\n- why\n- and why\n"
    assert _keep_hand_written("# B\n", old) == f"# B\n\n{HAND_WRITTEN}\n\n- why\n- and why\n"


def test_a_page_without_it_gives_the_report_as_it_is() -> None:
    assert _keep_hand_written("# B\n\n## A\n", "") == "# B\n\n## A\n"


def test_the_page_has_the_section() -> None:
    assert f"\n{HAND_WRITTEN}\n" in PAGE.read_text(encoding="utf-8")
