"""Signatures: the whole HMAC-SHA256 for approvals, a 16-byte tag for checkpoints; each
verifies only with the key and the message it was made for, and only at those lengths."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from acode.security.signing import TAG_BYTES, Signer

_KEY = b"k" * 32


@given(message=st.binary(max_size=512))
def test_a_tag_is_the_head_of_the_whole_signature_and_both_verify(message: bytes) -> None:
    signer = Signer(_KEY)
    tag, whole = signer.tag(message), signer.sign(message)
    assert len(tag) == TAG_BYTES == 16
    assert whole.startswith(tag.hex())
    assert signer.verify(message, whole)
    assert signer.verify(message, tag.hex())


@given(key=st.binary(min_size=1, max_size=200), message=st.binary(max_size=512))
def test_the_signature_is_the_standard_hmac_sha256(key: bytes, message: bytes) -> None:
    """Checked against the standard library's HMAC, keys longer than a SHA-256 block
    included: checkpoints and approvals written by any version verify in any other."""
    expected = hmac.new(key, message, hashlib.sha256).hexdigest()
    assert Signer(key).sign(message) == expected
    assert Signer(key).tag(message).hex() == expected[: 2 * TAG_BYTES]


@given(message=st.binary(max_size=64), other=st.binary(max_size=64))
def test_another_message_or_key_fails(message: bytes, other: bytes) -> None:
    signer = Signer(_KEY)
    tag = signer.tag(message).hex()
    assert signer.verify(other, tag) is (other == message)
    assert not Signer(b"another key").verify(message, tag)


def test_only_the_two_lengths_are_accepted() -> None:
    signer = Signer(_KEY)
    whole = signer.sign(b"checkpoint")
    for cut in (0, 2, 16, 30, 34, 62):
        assert not signer.verify(b"checkpoint", whole[:cut])
    assert not signer.verify(b"checkpoint", whole + "00")
    assert not signer.verify(b"checkpoint", "zz" * 16)
