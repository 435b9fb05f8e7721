"""read_json: JSON from outside, read into values acode can record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acode.domain.json_text import MAX_JSON_DEPTH, read_json

# Text as JSON carries it: any character but a lone half of a surrogate pair.
TEXT = st.text(st.characters(exclude_categories=["Cs"]))
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=30,
)


@given(value=VALUES, ascii_only=st.booleans())
def test_any_json_value_acode_can_record_reads_back_equal(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert read_json(text) == value
    assert read_json(text.encode("utf-8")) == value


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("NaN", "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ("[1e400]", "the number 1e400 is out of range"),
        ("[" * 100_000 + "]" * 100_000, f"nested more than {MAX_JSON_DEPTH} levels deep"),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "nested more than"),
        ('{"k": "\\ud800"}', "half a UTF-16 surrogate pair"),
        ('{"\\udfff": 1}', "half a UTF-16 surrogate pair"),
        ('"a\udcffb"', "half a UTF-16 surrogate pair"),  # an argument that was not UTF-8
        ("{", "Expecting property name"),
    ],
)
def test_what_no_record_can_hold_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace("+", r"\+")):
        read_json(text)


def test_the_deepest_json_accepted_is_the_limit() -> None:
    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert read_json(deepest) is not None


def test_lone_surrogates_are_replaced_when_asked_and_pairs_kept() -> None:
    text = '{"content": "a\\ud800b \\ud83d\\ude00 \\udc00"}'
    assert read_json(text, replace_surrogates=True) == {"content": "a\ufffdb \U0001f600 \ufffd"}
    assert read_json('"\\ud83d\\ude00"') == "\U0001f600"  # a whole pair is one character
