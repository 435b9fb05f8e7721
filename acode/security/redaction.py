"""Secret redaction for everything acode shows or writes outside its database: CLI text
and JSON, logs, progress files, exports, work-session files and lock files.

:func:`redact` is the one function every such output goes through (:func:`redact_json`
applies it to each string of a JSON value). Only known secret shapes are redacted:
provider tokens, cloud keys, JWTs, ``Authorization`` and bearer headers,
``password=``-style pairs (quoted values whole, JSON-escaped text too), credentials in
URLs, and private key blocks, even cut in half. A token keeps its last four characters
so that a person can still tell two apart.

Generic long strings are deliberately left alone: SHA-256 hashes, git commit ids and
UUIDs fill acode's output and are not secrets, and a redactor that eats them makes
logs useless. So a random-looking string is masked only where its name gives it away
(``token: ...``, ``"api_key": "..."``), not for its entropy (docs/progress-file.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["MASK", "redact", "redact_blocks", "redact_json"]

MASK = "***"
PRIVATE_KEY_MASK = "***private key redacted***"


def _keep_tail(secret: str) -> str:
    return f"{MASK}{secret[-4:]}" if len(secret) > 8 else MASK


def _whole(match: re.Match[str]) -> str:
    return _keep_tail(match.group(0))


def _value(match: re.Match[str]) -> str:
    """The match with its group ``s`` (or, when that did not take part, ``u``) masked."""
    name = "s" if match.group("s") is not None else "u"
    start, end = match.span(name)
    offset = match.start(0)
    text = match.group(0)
    return text[: start - offset] + _keep_tail(match.group(name)) + text[end - offset :]


# Each token shape: its literal starts, which are also its rule's clue, and the rest. The
# starts are alternatives of plain text: joined, they make a pattern that ``re`` searches
# by its first characters, much faster than with groups in it
# (docs/benchmarks.md, "Figures behind design choices").
_TOKEN_SHAPES = [
    ("A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA", r"[0-9A-Z]{16}"),  # AWS access key ids
    ("gh[pousr]_", r"[A-Za-z0-9_]{36,}\b"),  # GitHub tokens
    ("github_pat_", r"[A-Za-z0-9_]{22,}\b"),
    (
        "glpat-|gldt-|glft-|glsoat-|glrt-|glcbt-|glimt-|glptt-|glagent-|gloas-",
        r"[A-Za-z0-9_-]{20,}",
    ),
    ("sk-ant-", r"[A-Za-z0-9_-]{20,}"),  # Anthropic
    ("sk-", r"(?:proj-)?[A-Za-z0-9_-]{20,}"),  # OpenAI
    ("sk_|rk_|pk_", r"(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    ("xox[abposr]-", r"[A-Za-z0-9-]{10,}"),  # Slack
    ("AIza", r"[0-9A-Za-z_-]{35}"),  # Google API key
    ("hf_", r"[A-Za-z0-9]{30,}\b"),  # Hugging Face
    ("npm_", r"[A-Za-z0-9]{36}\b"),  # npm
    ("pypi-", r"AgE[A-Za-z0-9_-]{50,}"),  # PyPI
    ("SG\\.", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),  # SendGrid
    ("eyJ", r"[A-Za-z0-9_=-]{8,}\.eyJ[A-Za-z0-9_=-]{4,}\.?[A-Za-z0-9_.+/=-]*"),  # JWT
]
# Where a token or a header may start: at a word's start, also in JSON-escaped text,
# where "\nAKIA..." has no word boundary before the "A".
_START = r"(?:\b|(?<=\\[nrt]))"
# The names a `name=secret` pair is known by. A name of the first kind may sit anywhere
# in a longer one ("db_password", "userPassword", "jwt_secret_key", "SECRET_VALUE"); one
# of the second stands alone or ends a name after "_" or "-" ("DB_PASS", "x-auth-token"),
# else "token_count" or "passed" would be one. Each holds one of _KEY_WORDS, its clue.
_KEY_NAMES = (
    "password", "passwd", "passphrase", "secret", "api[_-]?key", "apikey", "access[_-]?key",
    "private[_-]?key", "client[_-]?key", "auth[_-]?key", "priv[_-]?key",
)  # fmt: skip
_SHORT_KEY_NAMES = ("pass", "pwd", "token")
_KEY_WORDS = ("pass", "pwd", "secret", "key", "token")

# A name, then what may close it (a quote, a bracket, JSON-escaped or not), then the
# assignment: ":", "=", ":=", "==", "=>", but not "::" (a path in code).
# The lookahead lets the pattern skip, with one test, every position that cannot start a
# name: without it, trying each name at every position made it several times slower
# (docs/benchmarks.md, "Figures behind design choices").
_NAME = (
    rf"(?=[{''.join(sorted({n[0] for n in _KEY_NAMES + _SHORT_KEY_NAMES}))}])"
    rf"(?:(?:{'|'.join(_KEY_NAMES)})[\w-]*"
    rf"|(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))(?:{'|'.join(_SHORT_KEY_NAMES)})(?![\w-]))"
)
_ASSIGN = r"""(?:\\*["'\]]){0,2}\s*(?::=|!==?|={1,3}>?|:(?!:))\s*"""
# The value: quoted, up to the same quote (escaped once, twice or not) on the same line,
# whatever it holds (spaces, ";"); else up to white space, a quote or a JSON escape such
# as "\n" (a value holding a backslash is masked up to it).
_QUOTED = r"""\\*(?P<q>["'`])(?!\*\*\*)(?P<s>[^\n]{1,512}?)\\*(?P=q)"""
_BARE = r"""\\*["'`]?(?!\*\*\*)(?P<u>(?:[^\s"'`\\]|\\(?![nrt"'`\\])){3,})"""

_BEGIN = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_END = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
# The body of a key whose BEGIN was cut off, read backwards from its END: the line just
# before the END, then whole lines (64 characters, 70 in OpenSSH keys), the first of
# them where the text or a quoted string starts (a cut output, a JSON value). One cut
# under 16 characters stays: it cannot be told from a word. Lines end in a newline, raw
# or JSON-escaped once or more ("\n" reversed is "n\").
_NEWLINE_BACKWARDS = r"(?:\n\r?|n\\+(?:r\\+)?)"
# A character of a body line, read backwards: never the "n" of an escaped newline.
_BODY_CHAR = r"(?:(?![nr]\\)[A-Za-z0-9+/=])"
_BODY_BACKWARDS = (
    rf"{_NEWLINE_BACKWARDS}{_BODY_CHAR}+"
    rf"(?:{_NEWLINE_BACKWARDS}{_BODY_CHAR}{{16,}}(?={_NEWLINE_BACKWARDS}|\Z|[\"']))*"
)


def _private_keys(text: str) -> str:
    """Every private key block masked whole: from BEGIN to END; from BEGIN to the end of
    the text when the END was cut off; and, when the BEGIN was cut off (a command's
    output keeps its last bytes), the body lines just before an END."""
    begins, ends = re.compile(_BEGIN), re.compile(_END)  # compiled once, by ``re``
    pieces: list[str] = []
    position = 0
    while True:
        begin = begins.search(text, position)
        end = ends.search(text, position)
        if begin is not None and (end is None or begin.start() < end.start()):
            closing = ends.search(text, begin.end())
            pieces += [text[position : begin.start()], PRIVATE_KEY_MASK]
            position = len(text) if closing is None else closing.end()
        elif end is not None:
            pieces += [text[position : _body_start(text, position, end.start())], PRIVATE_KEY_MASK]
            position = end.end()
        else:
            pieces.append(text[position:])
            return "".join(pieces)


def _body_start(text: str, floor: int, end: int) -> int:
    """Where the body of the key whose END is at ``end`` starts (``floor`` at the
    earliest). Matched on the text reversed, so that each character is read once."""
    body = re.match(_BODY_BACKWARDS, text[floor:end][::-1])
    return end if body is None else end - body.end()


# What each rule's matches cannot do without: a rule whose clue is absent from a text is
# not run on it. Most text holds none (a step id, a path, a sentence), and running the
# patterns over every character was most of a progress file's rendering.
# ``folded`` is the text casefolded: the key, bearer and authorization rules ignore
# case, and casefolding maps every character those patterns match case-insensitively
# onto the ASCII letter (the long s onto s, the Kelvin sign onto k).
_Clue = Callable[[str, str], bool]
_TOKEN_STARTS = "|".join(start for start, _ in _TOKEN_SHAPES)


def _private_key_clue(text: str, folded: str) -> bool:
    return "PRIVATE KEY" in text


def _token_clue(text: str, folded: str) -> bool:
    return re.search(_TOKEN_STARTS, text) is not None


def _header_clue(text: str, folded: str) -> bool:
    return "bearer" in folded or "authorization" in folded


def _url_clue(text: str, folded: str) -> bool:
    return "://" in text and "@" in text


def _pair_clue(text: str, folded: str) -> bool:
    return ("=" in text or ":" in text) and any(word in folded for word in _KEY_WORDS)


class _Rule(NamedTuple):
    clue: _Clue
    apply: Callable[[str], str]


def _sub(pattern: str, replace: Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    # Compiled the first time a text holds the rule's clue, and kept by ``re``: a process
    # whose texts hold none (the log lines of `acode resume`) compiles none, and is spared
    # compiling them all (docs/benchmarks.md, "Figures behind design choices").
    return lambda text: re.sub(pattern, replace, text)


_RULES: tuple[_Rule, ...] = (
    _Rule(clue=_private_key_clue, apply=_private_keys),
    _Rule(
        clue=_token_clue,
        apply=_sub("|".join(rf"(?:{_START}(?:{s}){rest})" for s, rest in _TOKEN_SHAPES), _whole),
    ),
    _Rule(
        clue=_header_clue,
        apply=_sub(
            # "Authorization: Basic dXNlcjpw", "Bearer abc", "authorization=Token abc".
            rf"(?i)(?:{_START}authorization\\*[\"']?\s*[:=]\s*\\*[\"']?(?:[a-z][a-z0-9-]*\s+)?"
            rf"|{_START}bearer\s+)(?P<s>[A-Za-z0-9._~+/=-]{{6,}})",
            _value,
        ),
    ),
    # scheme://user:password@host; the password may hold "/" or ":" (a URL parser would
    # choke on them, but a person may write them), not "?" or "#" (a query's "@").
    _Rule(
        clue=_url_clue, apply=_sub(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@?#]+)@", _value)
    ),
    _Rule(clue=_pair_clue, apply=_sub(rf"(?i){_NAME}{_ASSIGN}(?:{_QUOTED}|{_BARE})", _value)),
)


def redact(text: str) -> str:
    """``text`` with every recognised secret masked."""
    folded = text.casefold()
    for clue, apply in _RULES:
        if clue(text, folded):
            masked = apply(text)
            if masked != text:  # the later rules read what this one left
                text, folded = masked, masked.casefold()
    return text


def redact_blocks(text: str) -> str:
    """``text`` with what spans lines (private keys) masked: for a text about to be cut
    into lines that are then redacted one by one. Every other shape fits on one line."""
    return _private_keys(text) if _private_key_clue(text, "") else text


def redact_json(value: Any) -> Any:
    """A JSON-like value with every string redacted, keys included. A string whose key
    names a secret is masked whole, so ``{"password": "hunter22"}`` is masked as
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
    if value and not value.startswith(MASK) and _names_a_secret(key):
        return _keep_tail(value)  # the whole of it: "correct horse battery staple"
    return redact(value)


@functools.lru_cache(maxsize=4096)
def _names_a_secret(key: str) -> bool:
    """Whether ``key`` is the name of a secret (``password``, ``x-api-key``, ``token``)."""
    return (
        any(word in key.casefold() for word in _KEY_WORDS)
        and re.fullmatch(rf"(?i)[\w.-]*?{_NAME}", key) is not None
    )
