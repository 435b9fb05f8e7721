"""Each secret leak found on main, one case each: the text as a command, a model or a
person produced it, and what of it must never be shown."""

from __future__ import annotations

import pytest

from acode.security.redaction import redact, redact_json

# Each leak the issue reproduced on main: (text, what must not be shown).
PEM_BODY = [
    "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB",
    "aFDrBz9vFqU4yM/5bvgBOaHjnwqgLBO7J3gq4oUdyVjTxO2x6Wfg8kE9R8QKQ0mN",
    "xB4wSpxhIk0Q5VdGb1xJ3p3bO6O7uK8QnB1EXAMPLEEXAMPLEEXAMPLEEXAMPLEX",
    "AbCdEfGhIjKl==",
]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        ('password = "several words here"', ["several", "words"]),
        ("password=p@ss;tail-end", ["p@ss;tail-end", "p@ss", "tail-end"]),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", ["dXNlcjpwYXNzd29yZA=="]),
        ("curl -H 'authorization: token 0123456789abcdef'", ["0123456789abcdef"]),
        ("postgresql://user:pa/ss@host:5432/db", ["pa/ss"]),
        ("DB_PASS=hunter2hunter2", ["hunter2hunter2"]),
        ("webhook_secret_value: abcdefgh1234", ["abcdefgh1234"]),
        ('userPassword: "correct horse"', ["correct horse", "correct"]),
        ('{"cmd": "echo hi\\npassword=hunter2x"}', ["hunter2x"]),
        ('{\\"password\\": \\"two words\\"}', ["two words", "two"]),
        ("a tool call: {\"command\": \"printf 'x\\npassword=hunter2x'\"}", ["hunter2x"]),
        # The output of a command keeps its last bytes: the BEGIN line was cut off.
        (PEM[40:] + "\ndone", PEM_BODY[1:3]),
        # A text cut after its first characters: the END line is gone.
        (PEM[:120], [PEM_BODY[0], PEM_BODY[1][:20]]),
    ],
    ids=[
        "quoted-words", "semicolon", "basic-auth", "authorization-token", "slash-in-url",
        "db-pass", "suffixed-secret", "camel-case", "json-escaped", "escaped-quotes",
        "tool-call", "pem-no-begin", "pem-no-end",
    ],
)  # fmt: skip
def test_the_leaks_of_main_are_masked(text: str, secrets: list[str]) -> None:
    out = redact(text)
    for secret in secrets:
        assert secret not in out, (text, out)


def test_a_pem_printed_by_a_command_keeps_the_text_around_it() -> None:
    out = redact(f"head\n{PEM}\ntail")
    assert out == "head\n***private key redacted***\ntail"
    assert redact(f"{PEM[40:]}\ntail").endswith("***private key redacted***\ntail")


@pytest.mark.parametrize(
    "text",
    [
        "token_count = len(tokens)",
        "passed: 123, failed: 0",
        "GET https://api.example.com:443/users?email=bob@example.com",
        "std::secret::Value",
        "the password field is required",
    ],
)
def test_names_that_only_look_like_secret_names_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_json_value_whose_key_names_a_secret_is_masked_whole() -> None:
    out = redact_json({"password": "correct horse battery", "x-api-key": "abc", "n": "plain"})
    assert out == {"password": "***tery", "x-api-key": "***", "n": "plain"}
