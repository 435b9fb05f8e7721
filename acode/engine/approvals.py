"""Approval decisions are signed events: the only way a gate opens.

A decision names the session, the step, its position and the hash of exactly what
was approved; it is signed with the user's key, so a decision inserted into the
database by hand is refused.
"""

from __future__ import annotations

import hashlib
from typing import Any

from acode.domain.events import canonical_json
from acode.security.signing import Signer

__all__ = ["decision_payload", "decision_valid", "subject_hash"]


def subject_hash(question: str, subject: object) -> str:
    return hashlib.sha256(canonical_json({"q": question, "s": subject}).encode()).hexdigest()


def _signed_part(session_id: str, payload: dict[str, Any]) -> bytes:
    keys = ("step", "position", "approved", "subject_hash", "by")
    return canonical_json({"session": session_id, **{k: payload.get(k) for k in keys}}).encode()


def decision_payload(
    signer: Signer,
    session_id: str,
    *,
    step: str,
    position: int,
    approved: bool,
    subject: str,
    by: str,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "step": step,
        "position": position,
        "approved": approved,
        "subject_hash": subject,
        "by": by,
    }
    payload["signature"] = signer.sign(_signed_part(session_id, payload))
    return payload


def decision_valid(signer: Signer, session_id: str, payload: dict[str, Any]) -> bool:
    signature = payload.get("signature")
    return isinstance(signature, str) and signer.verify(
        _signed_part(session_id, payload), signature
    )
