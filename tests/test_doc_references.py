"""The repository explains itself: no file names a document outside it (the design notes,
the user's specifications and notes live elsewhere and are not shipped), and every
requirement, invariant and threat that code or docs cite by number is defined in
docs/requirements.md or docs/invariants.md, which cover what they claim to."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# This file spells out the patterns it looks for.
SELF = Path(__file__).resolve()

OUTSIDE = re.compile(
    r"DESIGN\.md|DESIGN invariant|\bshared/|\bspecs/"
    r"|\b00[1-4] §|\bspec(?:ification)? 00[1-4]\b|/work/shared\b"
)
# "FR-046..055", "FR-001..FR-065", "NFR-001 to NFR-003": both ends are checked.
REQUIREMENT = re.compile(r"\b(N?FR)-(\d{3})(?:(?:\.\.| to )(?:N?FR-)?(\d{3}))?")
NUMBERED = re.compile(r"\b([Ii]nvariants?|[Tt]hreats?) (\d+(?:(?:, | and | to )\d+)*)\b")
LINK = re.compile(r"\]\(([\w./-]*\.md)?#([\w-]+)\)")


def _files() -> Iterator[Path]:
    for folder in ("acode", "bench", "tests", "examples"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".yml", ".yaml", ".toml", ".txt", ".sql"}:
                yield path
    yield from sorted(DOCS.glob("*.md"))
    yield ROOT / "README.md"


def _text(path: Path) -> str:
    """The file with its lines joined, comment markers and indentation dropped, so that a
    reference split over two lines of a comment or a paragraph is still one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#+[ \t]*)?", " ", path.read_text(encoding="utf-8"))


FILES = [path for path in _files() if path.resolve() != SELF and ".venv" not in path.parts]
TEXTS = {path.relative_to(ROOT).as_posix(): _text(path) for path in FILES}


def _defined(page: str, pattern: str) -> list[str]:
    return re.findall(pattern, (DOCS / page).read_text(encoding="utf-8"), flags=re.MULTILINE)


REQUIREMENTS = _defined("requirements.md", r"^- (N?FR-\d{3}):")
THREATS = {int(n) for n in _defined("requirements.md", r"^- threat (\d+):")}
INVARIANTS = {int(n) for n in _defined("invariants.md", r"^## (\d+)\. ")}


def test_the_files_are_found() -> None:
    assert {"acode/domain/kinds.py", "docs/resume.md", "README.md"} <= TEXTS.keys()


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_no_file_names_a_document_outside_the_repository(name: str) -> None:
    found = [match.group(0) for match in OUTSIDE.finditer(TEXTS[name])]
    assert not found, (
        f"{name} cites {found}: cite the repository's own docs instead "
        "(docs/invariants.md, docs/requirements.md, docs/testing.md, docs/benchmarks.md)"
    )


def _cited(text: str) -> Iterator[tuple[str, int]]:
    for match in REQUIREMENT.finditer(text):
        prefix, first, last = match.groups()
        yield prefix, int(first)
        if last:
            yield prefix, int(last)
    for match in NUMBERED.finditer(text):
        word = "invariant" if match.group(1).lower().startswith("invariant") else "threat"
        for number in re.findall(r"\d+", match.group(2)):
            yield word, int(number)


def test_every_cited_number_is_defined() -> None:
    known = {
        **{(r.split("-")[0], int(r.split("-")[1])): True for r in REQUIREMENTS},
        **{("invariant", n): True for n in INVARIANTS},
        **{("threat", n): True for n in THREATS},
    }
    unknown = sorted(
        f"{name}: {kind} {number}"
        for name, text in TEXTS.items()
        for kind, number in _cited(text)
        if (kind, number) not in known
    )
    assert not unknown, "cited but not in docs/requirements.md or docs/invariants.md:\n" + (
        "\n".join(unknown)
    )


def test_the_requirements_list_each_requirement_once() -> None:
    expected = [f"FR-{n:03d}" for n in range(1, 66)] + [f"NFR-{n:03d}" for n in range(1, 17)]
    assert expected == REQUIREMENTS
    assert {1, 2, 3, 4, 5} == THREATS


def test_the_invariants_are_numbered_without_a_gap() -> None:
    assert sorted(INVARIANTS) == list(range(1, len(INVARIANTS) + 1))
    assert len(INVARIANTS) >= 11


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", ["invariants.md", "requirements.md", "architecture.md"])
def test_links_from_the_reference_pages_reach_their_sections(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    broken = [
        f"{target or page}#{anchor}"
        for target, anchor in LINK.findall(text)
        if anchor not in _anchors(DOCS / (target or page))
    ]
    assert not broken, f"docs/{page} links to sections that do not exist: {broken}"


def test_links_into_the_reference_pages_reach_their_sections() -> None:
    broken = [
        f"{name} -> {target}#{anchor}"
        for name, text in TEXTS.items()
        if name.startswith("docs/") or name == "README.md"
        for target, anchor in LINK.findall(text)
        if target in {"invariants.md", "requirements.md", "testing.md", "benchmarks.md"}
        and anchor not in _anchors(DOCS / target)
    ]
    assert not broken, f"links to sections that do not exist: {broken}"
