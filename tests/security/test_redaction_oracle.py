"""Redaction judged by a well-kept secret scanner: Yelp's detect-secrets.

Hypothesis writes texts that embed the secret shapes detect-secrets knows (cloud keys,
private keys, credentials in URLs, JWTs, provider tokens, ``name = value`` pairs in
every assignment and quoting style, high-entropy strings assigned to secret names), in
plain text, log lines, JSON and JSON-escaped JSON (a tool call's arguments). Whatever
detect-secrets' plugins flag in such a text must be gone from what acode shows, and so
must every secret the text was built with.

Three of its plugins are not the oracle, on purpose (docs/progress-file.md, "What is
redacted"): the two high-entropy ones flag every quoted random-looking string, and
acode's output is full of SHA-256 hashes, commit ids and UUIDs that are not secrets;
acode masks such a string where its name gives it away, which the keyword plugin
checks. The public-IP plugin flags addresses, which acode shows on purpose.
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP, KeywordDetector
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.security.redaction import redact, redact_json

NOT_THE_ORACLE = {"Base64 High Entropy String", "Hex High Entropy String", "Public IP (ipv4)"}
PLUGIN_CLASSES: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
PLUGINS = [cls() for kind, cls in PLUGIN_CLASSES.items() if kind not in NOT_THE_ORACLE]


def flagged(text: str) -> set[str]:
    """What detect-secrets flags in ``text``, line by line as it scans files: the whole
    match of a plugin's pattern (some report only a group, such as GitHub's "ghp"), and
    the keyword plugin's values both as for code (quotes required) and as for
    configuration files."""
    found: set[str] = set()
    for line in text.splitlines():
        for plugin in PLUGINS:
            if isinstance(plugin, RegexBasedDetector) and not isinstance(plugin, JwtTokenDetector):
                found.update(m.group(0) for p in plugin.denylist for m in p.finditer(line))
                continue
            # analyze_string: the values, without analyze_line's network verification.
            found.update(plugin.analyze_string(line))
            if isinstance(plugin, KeywordDetector):
                found.update(
                    plugin.analyze_string(
                        line, denylist_regex_to_group=CONFIG_DENYLIST_REGEX_TO_GROUP
                    )
                )
    return {value for value in found if value}


# Every secret is 8 characters or more: a shorter one could be the last four characters
# that acode keeps of another (``***0000``).
@dataclass(frozen=True)
class Piece:
    text: str
    secrets: tuple[str, ...]  # what must not be shown
    first: bool = False  # only ever at the start of a text


ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"


def chars(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=size, max_size=size)


def secret_value() -> st.SearchStrategy[str]:
    """What a person puts in a password: letters, digits and signs, sometimes words."""
    word = st.text(ALNUM + "@#%^&*!?/+-_.;,", min_size=8, max_size=24).filter(
        lambda s: s[0].isalnum() and s[-1].isalnum()
    )
    return st.one_of(word, st.lists(word, min_size=2, max_size=3).map(" ".join))


aws_key_id = st.builds(
    lambda prefix, rest: Piece(prefix + rest, (prefix + rest,)),
    st.sampled_from(["AKIA", "ASIA", "ABIA", "ACCA"]),
    chars(UPPER, 16),
)
aws_secret = st.builds(
    lambda name, value, quote: Piece(f"{name} = {quote}{value}{quote}", (value,)),
    st.sampled_from(["aws_secret_access_key", "AWS_SECRET_KEY", "aws_password"]),
    chars(B64, 40),
    st.sampled_from(['"', "'"]),
)
github = st.builds(
    lambda kind, rest: Piece(f"gh{kind}_{rest}", (f"gh{kind}_{rest}",)),
    st.sampled_from("pousr"),
    chars(ALNUM, 36),
)
gitlab = st.builds(lambda rest: Piece(f"glpat-{rest}", (f"glpat-{rest}",)), chars(ALNUM + "_-", 20))
slack = st.builds(
    lambda kind, team, rest: Piece(f"xox{kind}-{team}-{rest}", (f"xox{kind}-{team}-{rest}",)),
    st.sampled_from("abpors"),
    chars(string.digits, 12),
    chars(string.ascii_lowercase + string.digits, 24),
)
stripe = st.builds(
    lambda kind, rest: Piece(f"{kind}_live_{rest}", (f"{kind}_live_{rest}",)),
    st.sampled_from(["sk", "rk"]),
    chars(ALNUM, 24),
)
openai = st.builds(
    lambda a, b: Piece(f"sk-{a}T3BlbkFJ{b}", (f"sk-{a}T3BlbkFJ{b}",)),
    chars(ALNUM, 20),
    chars(ALNUM, 20),
)
sendgrid = st.builds(
    lambda a, b: Piece(f"SG.{a}.{b}", (f"SG.{a}.{b}",)),
    chars(ALNUM + "_-", 22),
    chars(ALNUM + "_-", 43),
)
npm = st.builds(
    lambda rest: Piece(f"//registry.npmjs.org/:_authToken=npm_{rest}", (f"npm_{rest}",)),
    chars(ALNUM, 36),
)


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


jwt = st.builds(
    lambda sub, signature: Piece(
        token := f"{_b64url({'alg': 'HS256'})}.{_b64url({'sub': sub})}.{signature}", (token,)
    ),
    st.text(string.ascii_lowercase, min_size=1, max_size=12),
    chars(ALNUM + "_-", 43),
)
basic_auth_url = st.builds(
    lambda scheme, user, password, host: Piece(
        f"{scheme}://{user}:{password}@{host}/db", (f":{password}@",)
    ),
    st.sampled_from(["postgresql", "https", "redis", "amqp"]),
    st.text(string.ascii_lowercase, min_size=1, max_size=8),
    st.text(ALNUM + "-._~%/", min_size=8, max_size=20).filter(lambda s: s[0] != "/"),
    st.sampled_from(["db.example.com", "127.0.0.1:5432", "cache"]),
)
authorization = st.builds(
    lambda scheme, value: Piece(f"Authorization: {scheme} {value}", (value,)),
    st.sampled_from(["Basic", "Bearer", "Token", "Digest"]),
    chars(B64, 24),
)
# A key name in the spellings people use, an assignment, a quoting, a value.
KEY_NAMES = [
    "password", "PASSWORD", "db_password", "userPassword", "passwd", "DB_PASS", "pwd",
    "secret", "client_secret", "jwt_secret_key", "SECRET_VALUE", "webhook_secret",
    "api_key", "apikey", "X-Api-Key", "private_key", "access_key", "auth_key", "token",
    "access_token", "auth-token", "refresh_token",
]  # fmt: skip
pair = st.builds(
    lambda name, assign, quote, value: Piece(f"{name}{assign}{quote}{value}{quote}", (value,)),
    st.sampled_from(KEY_NAMES),
    st.sampled_from(["=", " = ", ": ", ":", " := ", "==", " => "]),
    st.sampled_from(['"', "'", ""]),
    secret_value(),
).filter(
    # Unquoted, a value ends at the first space: what follows is the text's next word.
    lambda p: " " not in p.secrets[0] or p.text.endswith(("'", '"'))
)
# A random-looking string is a secret where its name says so.
high_entropy = st.builds(
    lambda name, value, quote: Piece(f"{name} = {quote}{value}{quote}", (value,)),
    st.sampled_from(["secret", "api_key", "password", "private_key"]),
    st.one_of(chars(B64, 32), chars("0123456789abcdef", 40)),
    st.sampled_from(['"', "'"]),
)


def private_key_lines() -> st.SearchStrategy[list[str]]:
    return st.lists(chars(B64, 64), min_size=2, max_size=5).map(lambda lines: [*lines, "AbC="])


def pem(kind: str, body: list[str], cut: str) -> Piece:
    block = "\n".join(
        [f"-----BEGIN {kind}PRIVATE KEY-----", *body, f"-----END {kind}PRIVATE KEY-----"]
    )
    if cut == "no begin":  # the output of a command, which keeps its last bytes
        return Piece(block[block.index("\n") + 20 :], tuple(body[1:-1]), first=True)
    if cut == "no end":  # a text cut after its first characters
        block = block[: block.rindex("\n") - 20]
    # Every whole body line but a first one cut short must be gone.
    return Piece(block, tuple(line for line in body[1:-1]))


private_key = st.builds(
    pem,
    st.sampled_from(["RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED ", ""]),
    private_key_lines(),
    st.sampled_from(["whole", "no begin", "no end"]),
)


SHAPES = st.one_of(
    aws_key_id, aws_secret, github, gitlab, slack, stripe, openai, sendgrid, npm, jwt,
    basic_auth_url, authorization, pair, high_entropy, private_key,
)  # fmt: skip
FILLER = st.sampled_from(
    [
        "running tests", "exit 0", "src/login.py", "sha256=" + "ab" * 32, "ok:", "config",
        "commit 0123456789abcdef0123456789abcdef01234567", "warning: unused import",
        "session 01a21576-ef83-7fc4-8a0f-1e327e8055ef", "{", "}", "-", "#",
    ]
)  # fmt: skip


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, tuple[str, ...]]:
    parts = draw(st.lists(st.one_of(SHAPES, FILLER.map(lambda f: Piece(f, ()))), max_size=6))
    parts.append(draw(SHAPES))
    parts = [p for p in parts if p.first][:1] + [p for p in parts if not p.first]
    separators = draw(
        st.lists(st.sampled_from(["\n", " ", "\n\n", "; ", " | "]), min_size=len(parts))
    )
    text = "".join(p.text + sep for p, sep in zip(parts, separators, strict=False))
    secrets = tuple(s for p in parts for s in p.secrets)
    form = draw(st.sampled_from(["plain", "json", "escaped"]))
    if form == "json":  # a tool call's arguments, as the model sends them
        text = json.dumps({"command": text})
    elif form == "escaped":  # and as they sit inside a recorded message
        text = json.dumps({"arguments": json.dumps({"command": text})})
    return text, secrets


def _escaped_forms(secret: str) -> set[str]:
    once = json.dumps(secret)[1:-1]
    return {secret, once, json.dumps(once)[1:-1]}


@settings(max_examples=400, deadline=None)
@given(texts())
def test_what_detect_secrets_flags_is_never_shown(case: tuple[str, tuple[str, ...]]) -> None:
    text, secrets = case
    shown = redact(text)
    for value in flagged(text):
        assert value not in shown, f"detect-secrets flags {value!r}, acode shows it"
    for secret in secrets:
        for form in _escaped_forms(secret):
            assert form not in shown, f"{secret!r} is shown"


@settings(max_examples=200, deadline=None)
@given(texts())
def test_what_detect_secrets_flags_in_a_json_value_is_never_shown(
    case: tuple[str, tuple[str, ...]],
) -> None:
    """The same texts as the values of a JSON document: a step's result, an export."""
    text, secrets = case
    shown = json.dumps(redact_json({"stdout": text, "result": {"output": [text]}}))
    for value in flagged(text):
        assert json.dumps(value)[1:-1] not in shown, f"detect-secrets flags {value!r}"
    for secret in secrets:
        assert json.dumps(secret)[1:-1] not in shown, f"{secret!r} is shown"
