"""model: one chat request to an OpenAI-compatible endpoint.

The request goes out with the conversation so far; the prompt and the answer are
appended to it in the same transaction as the step's completion. A recorded
answer is never requested again; an unanswered request is simply sent again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from acode.domain.kinds import StepKind
from acode.domain.usage import call_cost
from acode.engine.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = ["ModelStep"]


@dataclass(frozen=True)
class ModelStep:
    prompt: str
    history: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    kind: StepKind = StepKind.MODEL
    durable_start: bool = False
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"prompt": self.prompt}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        from acode.system.model_client import build_chat_payload, chat, request_hash

        question = {"role": "user", "content": self.prompt}
        messages = [*self.history, question]
        settings = env.config.model
        response = chat(settings, messages)
        answer = {"role": "assistant", "content": response.content}
        result: dict[str, Any] = {
            "content": response.content,
            "model": response.model,
            "finish_reason": response.finish_reason,
            "usage": response.usage,
            "request_hash": request_hash(build_chat_payload(settings, messages)),
        }
        cost = call_cost(env.config.pricing, (settings.name, response.model), response.usage)
        if cost is not None:
            result["cost_usd"] = cost
        return Outcome(result, messages=(("user", question), ("assistant", answer)))

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        return Recovery(action=RecoveryAction.RETRY, detail="an unanswered request is sent again")

    def value(self, store: EventStore, result: Any) -> str:
        return str(result["content"])
