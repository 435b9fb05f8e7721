"""chat: one request of an agent's conversation, with tools, to an OpenAI-compatible server.

The caller builds the whole request body, and the step's input is its hash
(``model_client.request_hash``, over the body's JSON with sorted keys): a replayed
conversation that differs in one character from the recorded one is non-determinism,
not a silent second request. A recorded answer is never requested
again; an unanswered request is simply sent again on resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from acode.domain.kinds import StepKind
from acode.domain.usage import call_cost
from acode.engine.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv
from acode.store.base import EventStore

__all__ = ["ChatStep"]


@dataclass(frozen=True)
class ChatStep:
    request: Mapping[str, Any] = field(compare=False)
    request_hash: str
    # Messages new since the previous request: appended to the transcript with the answer.
    new_messages: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    kind: StepKind = StepKind.MODEL
    durable_start: bool = False
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"request": self.request_hash}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        from acode.system.model_client import send_chat

        response = send_chat(env.config.model, self.request)
        answer: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.tool_calls:
            answer["tool_calls"] = list(response.tool_calls)
        result: dict[str, Any] = {
            "content": response.content,
            "tool_calls": list(response.tool_calls),
            "finish_reason": response.finish_reason,
            "usage": response.usage,
            "model": response.model,
            "request_hash": self.request_hash,
        }
        models = (env.config.model.name, response.model)
        cost = call_cost(env.config.pricing, models, response.usage)
        if cost is not None:
            result["cost_usd"] = cost
        messages = tuple((str(m.get("role", "user")), dict(m)) for m in self.new_messages)
        return Outcome(result, messages=(*messages, ("assistant", answer)))

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        return Recovery(action=RecoveryAction.RETRY, detail="an unanswered request is sent again")

    def value(self, store: EventStore, result: Any) -> dict[str, Any]:
        return dict(result)
