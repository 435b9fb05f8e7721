"""The pure rules of a prune: ages, the sessions chosen, families kept whole."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acode.domain.config import RetentionSettings
from acode.domain.retention import (
    DAY_US,
    Criteria,
    Prunable,
    category,
    criteria_from_retention,
    parse_age,
    prune_record_message,
    select,
    whole_families,
)
from acode.errors import UsageError


@pytest.mark.parametrize(
    ("text", "us"), [("30d", 30 * DAY_US), ("12h", DAY_US // 2), ("2w", 14 * DAY_US)]
)
def test_ages(text: str, us: int) -> None:
    assert parse_age(text) == us


@pytest.mark.parametrize(
    "text", ["30", "30x", "-5d", "0d", "d", "1.5d", "30 d s", "", "9999999d", "\uff13\uff10d"]
)
def test_what_is_not_an_age(text: str) -> None:
    with pytest.raises(UsageError, match="is not an age"):
        parse_age(text)


def test_categories() -> None:
    assert category("COMPLETED", archived=False) == "completed"
    assert category("PAUSED", archived=True) == "discarded"
    assert category("PAUSED", archived=False) is None
    assert category("EXECUTING", archived=False) is None
    assert category("EDITED", archived=True) is None


def test_retention_by_state_then_size() -> None:
    now = 100 * DAY_US
    sessions = [
        Prunable("a", "completed", now - 40 * DAY_US, None),
        Prunable("b", "failed", now - 40 * DAY_US, None),
        Prunable("c", "completed", now - 5 * DAY_US, None),
        Prunable("d", "cancelled", now - 1 * DAY_US, None),
    ]
    criteria = criteria_from_retention(RetentionSettings(completed_days=30), now)
    assert select(sessions, criteria, {}, 0) == ["a"]
    sized = Criteria(cutoffs=criteria.cutoffs, max_bytes=100)
    sizes = {"a": 50, "b": 30, "c": 30, "d": 30}
    assert select(sessions, sized, sizes, 200) == ["a", "b", "c"]  # oldest first, until it fits


_FAMILIES = st.dictionaries(
    st.sampled_from("abcdefgh"), st.one_of(st.none(), st.sampled_from("abcdefgh")), min_size=1
)


@given(parents=_FAMILIES, chosen=st.sets(st.sampled_from("abcdefgh")))
def test_families_go_whole(parents: dict[str, str | None], chosen: set[str]) -> None:
    chosen &= set(parents)
    going, kept = whole_families(sorted(chosen), parents)
    gone = set(going)
    assert gone <= chosen
    assert set(kept) == chosen - gone
    for child, parent in parents.items():
        if parent in parents and parent != child:
            assert (child in gone) == (parent in gone) or (child not in gone and parent not in gone)


def test_the_signed_message_names_every_field() -> None:
    base = prune_record_message("id", "COMPLETED", 1, 2, b"h")
    assert (
        len(
            {
                base,
                prune_record_message("id2", "COMPLETED", 1, 2, b"h"),
                prune_record_message("id", "FAILED", 1, 2, b"h"),
                prune_record_message("id", "COMPLETED", 3, 2, b"h"),
                prune_record_message("id", "COMPLETED", 1, 4, b"h"),
                prune_record_message("id", "COMPLETED", 1, 2, b"x"),
            }
        )
        == 6
    )
