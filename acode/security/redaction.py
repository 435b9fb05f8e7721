"""Secret redaction for everything acode writes outside its database: logs, progress
files, exports, and command output shown to people.

Only known secret shapes are redacted (provider tokens, cloud keys, bearer headers,
``password=``-style pairs, credentials in URLs, private key blocks), keeping the last
four characters so a person can still tell two secrets apart. Generic long strings are
deliberately left alone: SHA-256 hashes, git commit ids and UUIDs are not secrets, and
a redactor that eats them makes logs useless.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MASK", "redact", "redact_json"]

MASK = "***"


def _keep_tail(secret: str) -> str:
    return f"{MASK}{secret[-4:]}" if len(secret) > 8 else MASK


def _whole(match: re.Match[str]) -> str:
    return _keep_tail(match.group(0))


def _group(name: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        start, end = match.span(name)
        text = match.group(0)
        offset = match.start(0)
        return text[: start - offset] + _keep_tail(match.group(name)) + text[end - offset :]

    return replace


# Each token shape: its literal start, which is also its rule's clue, and the rest.
_TOKEN_SHAPES = [
    ("AKIA", r"[0-9A-Z]{16}\b"),  # AWS access key id
    ("ASIA", r"[0-9A-Z]{16}\b"),  # AWS temporary access key id
    ("gh[pousr]_", r"[A-Za-z0-9]{36,}\b"),  # GitHub tokens
    ("github_pat_", r"[A-Za-z0-9_]{22,}\b"),
    ("glpat-", r"[A-Za-z0-9_-]{20,}\b"),  # GitLab
    ("sk-ant-", r"[A-Za-z0-9_-]{20,}"),  # Anthropic
    ("sk-", r"(?:proj-)?[A-Za-z0-9_-]{20,}"),  # OpenAI
    ("(?:sk|rk|pk)_", r"(?:live|test)_[A-Za-z0-9]{16,}\b"),  # Stripe
    ("xox[abprs]-", r"[A-Za-z0-9-]{10,}\b"),  # Slack
    ("AIza", r"[0-9A-Za-z_-]{35}\b"),  # Google API key
    ("hf_", r"[A-Za-z0-9]{30,}\b"),  # Hugging Face
    ("npm_", r"[A-Za-z0-9]{36}\b"),  # npm
    ("eyJ", r"[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
]
# The names a `name=secret` pair is known by; each holds one of _KEY_WORDS, its clue.
_KEY_NAMES = (
    "password", "passwd", "pwd", "secret", "api[_-]?key", "apikey", "access[_-]?key",
    "secret[_-]?key", "access[_-]?token", "auth[_-]?token", "refresh[_-]?token",
    "client[_-]?secret", "token",
)  # fmt: skip
_KEY_WORDS = ("pass", "pwd", "secret", "key", "token")


# What each rule's matches cannot do without: a rule whose clue is absent from a text is
# not run on it. Most text holds none (a step id, a path, a sentence), and running the
# five patterns over every character was most of a progress file's rendering.
# ``folded`` is the text casefolded: the key and bearer rules ignore case, and
# casefolding maps every character those patterns match case-insensitively onto the
# ASCII letter (the long s onto s, the Kelvin sign onto k).
_Clue = Callable[[str, str], bool]
_TOKEN_STARTS = "|".join(start for start, _ in _TOKEN_SHAPES)


def _private_key_clue(text: str, folded: str) -> bool:
    return "PRIVATE KEY-----" in text


def _token_clue(text: str, folded: str) -> bool:
    return re.search(_TOKEN_STARTS, text) is not None


def _bearer_clue(text: str, folded: str) -> bool:
    return "bearer" in folded


def _url_clue(text: str, folded: str) -> bool:
    return "://" in text and "@" in text


def _pair_clue(text: str, folded: str) -> bool:
    return ("=" in text or ":" in text) and any(word in folded for word in _KEY_WORDS)


# The rules, each a clue, a pattern and its replacement. A pattern is compiled the first
# time a text holds its clue, and kept by ``re``: a process whose texts hold none (the
# log lines of `acode resume`) compiles none, which took 4.5 ms.
_RULES: tuple[tuple[_Clue, str, Callable[[re.Match[str]], str]], ...] = (
    (
        _private_key_clue,
        r"(?s)-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r".*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        lambda m: "-----BEGIN PRIVATE KEY----- ***redacted*** -----END PRIVATE KEY-----",
    ),
    (_token_clue, "|".join(rf"(?:\b{start}{rest})" for start, rest in _TOKEN_SHAPES), _whole),
    (
        _bearer_clue,
        r"(?i)\b(?:authorization\s*[:=]\s*)?bearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})",
        _group("s"),
    ),
    (
        # scheme://user:password@host
        _url_clue,
        r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@",
        _group("s"),
    ),
    (
        _pair_clue,
        # Any key ending in one of these words ("db_password", "x-api-key"): a word not
        # preceded by a letter or digit. (Matching the key's prefix too was quadratic on
        # long runs of "." or "-": milliseconds for a 300-byte payload.)
        rf"(?i)(?<![A-Za-z0-9])(?:{'|'.join(_KEY_NAMES)})"
        r"[\"']?\s*[:=]\s*[\"']?(?!\*\*\*)(?P<s>[^\s\"',;&]{4,})",
        _group("s"),
    ),
)


def redact(text: str) -> str:
    """``text`` with every recognised secret masked."""
    folded = text.casefold()
    for clue, pattern, replace in _RULES:
        if clue(text, folded):
            masked = re.sub(pattern, replace, text)
            if masked != text:  # the later rules read what this one left
                text, folded = masked, masked.casefold()
    return text


def redact_json(value: Any) -> Any:
    """A JSON-like value with every string redacted, keys included. A string is judged
    together with its key, so ``{"password": "hunter22"}`` is masked as
    ``password=hunter22`` would be: a password has no shape, only its name gives it away."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redact_field(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v) for v in value]
    return value


def _redact_field(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return redact_json(value)
    prefix = f"{key}="
    masked = redact(prefix + value)
    # A key that itself has a secret's shape changes the prefix too: judge the value alone.
    return masked[len(prefix) :] if masked.startswith(prefix) else redact(value)
