"""What the engine records of every step: the fields each event about it carries, and
the hash of its input that a replay compares."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from acode.domain.events import canonical_json
from acode.domain.reducer import DEFAULT_STEP_KIND, FIRST_ATTEMPT
from acode.engine.replay import NO_INPUT
from acode.engine.steps.base import StepContext

__all__ = ["input_hash", "step_payload"]


def input_hash(data: Mapping[str, Any]) -> str:
    if not data:
        return NO_INPUT
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:32]


def step_payload(ctx: StepContext, input_hash: str) -> dict[str, Any]:
    """The fields every event about a step carries."""
    # No idempotency key: it is made from the session, step and attempt recorded here.
    payload: dict[str, Any] = {"step": ctx.step_id, "position": ctx.position}
    if ctx.kind != DEFAULT_STEP_KIND:
        payload["kind"] = ctx.kind
    if ctx.attempt != FIRST_ATTEMPT:
        payload["attempt"] = ctx.attempt
    if input_hash != NO_INPUT:
        payload["input_hash"] = input_hash
    if ctx.task_id is not None:
        payload["task"] = ctx.task_id
    return payload
