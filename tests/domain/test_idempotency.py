"""Idempotency keys ``acode:v1:<session>:<step>:<attempt>``: they parse back to their
parts, garbage is not a key, and one prefix finds every attempt of one step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.idempotency import (
    STEP_ID_PATTERN,
    IdempotencyKey,
    generate,
    parse,
    step_prefix,
)
from acode.domain.ids import uuid7

SESSION = uuid7(1_732_000_000_000, bytes(range(10)))

sessions = st.builds(uuid7, st.integers(0, 2**48 - 1), st.binary(min_size=10, max_size=10))
step_ids = st.from_regex(STEP_ID_PATTERN, fullmatch=True)
attempts = st.integers(1, 10**9)
bad_step_ids = st.text(max_size=70).filter(lambda s: STEP_ID_PATTERN.fullmatch(s) is None)


@settings(max_examples=100, deadline=None)
@given(sessions, step_ids, attempts)
def test_a_generated_key_parses_back_to_its_parts(session: str, step: str, attempt: int) -> None:
    key = generate(session, step, attempt)
    assert key == f"acode:v1:{session}:{step}:{attempt}"
    parsed = parse(key)
    assert parsed == IdempotencyKey(session, step, attempt)
    assert str(parsed) == key


@settings(max_examples=100, deadline=None)
@given(sessions, step_ids, st.lists(attempts, min_size=1, max_size=5))
def test_the_step_prefix_starts_every_attempt_of_the_step(
    session: str, step: str, tries: list[int]
) -> None:
    prefix = step_prefix(session, step)
    for attempt in tries:
        assert generate(session, step, attempt).startswith(prefix)


@settings(max_examples=100, deadline=None)
@given(sessions, step_ids, step_ids, attempts)
def test_the_step_prefix_of_one_step_starts_no_key_of_another(
    session: str, step: str, other: str, attempt: int
) -> None:
    # "build" must not find the keys of "build.2": the prefix ends at the separator.
    if step != other:
        assert not generate(session, other, attempt).startswith(step_prefix(session, step))


def test_a_longer_step_id_does_not_share_the_prefix() -> None:
    assert not generate(SESSION, "build.2", 1).startswith(step_prefix(SESSION, "build"))
    assert not generate(SESSION, "build", 11).startswith(step_prefix(SESSION, "build:1"))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120))
def test_parse_accepts_only_exact_keys(text: str) -> None:
    parsed = parse(text)
    assert parsed is None or str(parsed) == text


@settings(max_examples=100, deadline=None)
@given(sessions, step_ids, attempts, st.sampled_from([" ", "\n", ":", ":1", "x", "\t"]))
def test_a_key_with_anything_around_it_is_not_a_key(
    session: str, step: str, attempt: int, extra: str
) -> None:
    key = generate(session, step, attempt)
    assert parse(key + extra) is None
    assert parse(extra + key) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "acode:v1",
        "acode:v1:",
        f"acode:v2:{SESSION}:step:1",
        f"acode:{SESSION}:step:1",
        f"{SESSION}:step:1",
        f"ACODE:V1:{SESSION}:step:1",
        f"acode:v1:{SESSION.upper()}:step:1",
        f"acode:v1:{SESSION[:-1]}:step:1",
        f"acode:v1:{SESSION}0:step:1",
        f"acode:v1:{SESSION}:step:0",
        f"acode:v1:{SESSION}:step:01",
        f"acode:v1:{SESSION}:step:-1",
        f"acode:v1:{SESSION}:step:1.0",
        f"acode:v1:{SESSION}:step:",
        f"acode:v1:{SESSION}::1",
        f"acode:v1:{SESSION}:-step:1",
        f"acode:v1:{SESSION}:st ep:1",
        f"acode:v1:{SESSION}:{'s' * 65}:1",
        f"acode:v1:{SESSION}:step:1:2",
        f"acode:v1:{SESSION}:step",
    ],
)
def test_parse_refuses_garbage(text: str) -> None:
    assert parse(text) is None


def test_the_longest_step_id_is_a_valid_key() -> None:
    longest = "s" * 64
    assert parse(generate(SESSION, longest, 3)) == IdempotencyKey(SESSION, longest, 3)


@settings(max_examples=100, deadline=None)
@given(bad_step_ids)
def test_an_invalid_step_id_is_refused(step: str) -> None:
    with pytest.raises(ValueError, match="invalid step id"):
        generate(SESSION, step, 1)


@pytest.mark.parametrize("step", ["", "-x", "_x", ".x", "a b", "a:b", "a/b", "é", "x\n", "s" * 65])
def test_invalid_step_ids_are_refused(step: str) -> None:
    with pytest.raises(ValueError, match="invalid step id"):
        generate(SESSION, step, 1)


@pytest.mark.parametrize("attempt", [0, -1, -(10**9)])
def test_attempts_are_numbered_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="numbered from 1"):
        generate(SESSION, "step", attempt)


def test_a_boolean_is_not_an_attempt() -> None:
    with pytest.raises(ValueError, match="numbered from 1"):
        generate(SESSION, "step", True)


@pytest.mark.parametrize("session", ["not-a-session", "a:b", "", SESSION.upper()])
def test_a_malformed_session_id_is_refused(session: str) -> None:
    with pytest.raises(ValueError, match="session id"):
        generate(session, "step", 1)
