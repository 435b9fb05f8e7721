"""Redaction masks known secret shapes and leaves hashes, ids and code alone."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.security.redaction import (
    _KEY_NAMES,
    _KEY_WORDS,
    _RULES,
    _SHORT_KEY_NAMES,
    redact,
    redact_json,
)

SECRETS = [
    ("AKIAIOSFODNN7EXAMPLE", "aws access key id"),
    ("ghp_" + "a1B2" * 9, "github token"),
    ("github_pat_" + "x" * 30, "github fine-grained token"),
    ("glpat-" + "z" * 20, "gitlab token"),
    ("sk-proj-" + "Q" * 40, "openai key"),
    ("sk-ant-api03-" + "w" * 40, "anthropic key"),
    ("sk_live_" + "4" * 24, "stripe key"),
    ("xoxb-1234567890-abcdefghij", "slack token"),
    ("AIza" + "S" * 35, "google api key"),
    ("hf_" + "k" * 34, "hugging face token"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "jwt",
    ),
]


@pytest.mark.parametrize(("secret", "what"), SECRETS)
def test_known_token_shapes_are_masked_keeping_the_last_four(secret: str, what: str) -> None:
    text = f"using {secret} for the call"
    out = redact(text)
    assert secret not in out, what
    assert f"***{secret[-4:]}" in out
    assert out.startswith("using ")
    assert out.endswith(" for the call")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdef1234567890XYZ", "abcdef1234567890XYZ"),
        ("curl -H 'authorization: bearer tok_9f8e7d6c5b4a'", "tok_9f8e7d6c5b4a"),
        ("password=hunter2hunter2", "hunter2hunter2"),
        ('{"api_key": "k-123456789abc"}', "k-123456789abc"),
        ("DB_PASSWORD: s3cr3t-value", "s3cr3t-value"),
        ("export OPENAI_API_KEY=abcd1234efgh5678", "abcd1234efgh5678"),
        ("client_secret = 'zzzzyyyyxxxx'", "zzzzyyyyxxxx"),
        ("postgresql://acode:pa55word-long@db.example:5432/acode", "pa55word-long"),
        ("token: 0123456789abcdef", "0123456789abcdef"),
    ],
)
def test_secret_pairs_headers_and_urls_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert "***" in out


def test_private_key_blocks_are_removed_whole() -> None:
    block = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQUJDREVG\n"
        "-----END OPENSSH PRIVATE KEY-----"
    )
    out = redact(f"key:\n{block}\nend")
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out
    assert "QUJDREVG" not in out
    assert out.startswith("key:\n")
    assert out.endswith("\nend")


def test_ordinary_text_and_code_stay_as_they_are() -> None:
    code = (
        "def login(user: str) -> bool:\n"
        "    token_count = len(tokens)  # not a secret\n"
        "    return check_password(user)\n"
    )
    assert redact(code) == code
    assert redact("the password field is required") == "the password field is required"


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64))
def test_hashes_and_ids_are_never_redacted(data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    commit = hashlib.sha1(data).hexdigest()
    ident = str(uuid.UUID(bytes=hashlib.md5(data).digest()))
    text = f"sha256={digest} commit {commit} session {ident} blob:{digest[:12]}"
    # `sha256=` is not a secret key name, so nothing here may change.
    assert redact(text) == text


def test_json_values_and_keys_are_redacted_recursively() -> None:
    value = {
        "cmd": "curl -H 'Authorization: Bearer abcdefghijklmnop'",
        "n": 3,
        "l": ["ghp_" + "b" * 36],
    }
    out = redact_json(value)
    assert "abcdefghijklmnop" not in str(out)
    assert "ghp_" + "b" * 36 not in str(out)
    assert out["n"] == 3


def _every_rule_everywhere(text: str) -> str:
    """Redaction as it was before the clues: every rule run over the whole text."""
    for rule in _RULES:
        text = rule.apply(text)
    return text


# Pieces of secrets, of the words and signs around them, and of the characters that
# match ASCII letters only when case is ignored (the long s, the Kelvin sign).
_PIECES = [
    *(secret for secret, _ in SECRETS),
    "password", "PassWord", "pa\u017f\u017fword", "pwd", "db_passwd", "secret", "SECRET_KEY",
    "api-key", "ApiKey", "access_token", "auth-token", "refresh_token", "client_secret",
    "toKen", "\u212aey", "Bearer ", "authorization: bearer ", "BEARER\t",
    "https://user:", "pa55w0rd-long", "@db.example", "://", "@",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----", "PRIVATE KEY-----", "MIIEvQIBADANBg",
    "AKIA", "ASIA", "ghp_", "gho_", "github_pat_", "glpat-", "sk-", "sk-ant-", "sk_live_",
    "rk_test_", "xoxb-", "AIza", "hf_", "npm_", "eyJ", ".eyJ",
    "=", ":", " = ", ": ", "\"", "'", " ", "\n", ",", ";", "&", "***", "-", "_", ".",
    "abcdefgh", "12345678", "QWERTYUIOPASDFGHJKLZ", "x" * 40,
]  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=14).map("".join))
def test_a_rule_skipped_for_want_of_its_clue_would_have_found_nothing(text: str) -> None:
    assert redact(text) == _every_rule_everywhere(text)


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword=hunter2hunter2",  # the long s: "password", case ignored
        "to\u212aen: abcdefgh12345678",  # the Kelvin sign: "token"
        "x-api-\u212aey=0123456789",
    ],
)
def test_characters_that_only_ignoring_case_makes_ascii_are_still_judged(text: str) -> None:
    assert redact(text) == _every_rule_everywhere(text) != text


def test_every_key_name_holds_its_rules_clue() -> None:
    for name in (*_KEY_NAMES, *_SHORT_KEY_NAMES):
        spelled = name.replace("[_-]?", "")
        assert any(word in spelled for word in _KEY_WORDS), name
