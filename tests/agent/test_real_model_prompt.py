"""What the real model is shown of a conversation that holds tool results.

acode sends each tool's result back as a `tool` message answering the assistant's call,
and a failed call's error is the result (acode/agent/loop.py): a chat format that drops
`tool` messages, as llama-cpp-python's own ``chatml-function-calling`` does, leaves the
model blind to it. The server of tests/support/llama_server.py writes every prompt it
gives the model to a file; acode's own requests go through it (the task tools with
``tool_choice: "auto"``, the plan tool forced, each after a tool result) and the prompt
must hold the assistant's call and the result as they were sent, while the tool calls
that come back stay well-formed.

The model is the base Gemma, not instruction-tuned: the test checks what the model is
shown and the shape of its answers, never their meaning. Without the model's environment
(`make test` builds it) the test is skipped with the reason, and fails with it when
CI=true.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from acode.agent.conversation import (
    assistant_message,
    planning_messages,
    system_message,
    tool_message,
)
from acode.agent.plan_schema import plan_feedback
from acode.agent.tools import (
    PLAN_TOOL_CHOICE,
    TASK_TOOL_CHOICE,
    TASK_TOOLS,
    ToolCall,
    parse_tool_calls,
    plan_tool,
)
from acode.domain.config import ModelSettings
from acode.system.model_client import ChatResponse, build_chat_payload, send_chat
from tests.support.llama_server import LlamaServer, unavailable_reason

pytestmark = pytest.mark.timeout(900)

TASK = "Add email validation to src/login.py"
EDIT_ARGUMENTS = json.dumps({"path": "src/auth.py", "old": "return True", "new": "return ok"})
# acode's result of an edit_file of a missing file; the quotes and the angle brackets
# would come out as &#39; and &lt; from a template that HTML-escapes.
EDIT_RESULT = "error: cannot edit 'src/auth.py': no such file <marker 7f3a>"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real-model prompt test cannot run in CI: {reason}")
        pytest.skip(f"THE REAL-MODEL PROMPT TEST DID NOT RUN: {reason}")
    log = tmp_path_factory.mktemp("llama") / "prompts.jsonl"
    with LlamaServer(prompt_log=log) as server:
        yield server


def settings(server: LlamaServer, max_tokens: int) -> ModelSettings:
    return ModelSettings(
        base_url=server.base_url,
        name=server.model,
        temperature=0,
        seed=42,
        max_tokens=max_tokens,
        timeout_seconds=600,
    )


def ask(server: LlamaServer, request: Mapping[str, Any]) -> tuple[ChatResponse, list[str]]:
    """The server's answer to ``request`` and the prompts the model was given for it: the
    rendered conversation first, then the same grown by what the model wrote so far."""
    assert server.prompt_log is not None
    server.prompt_log.write_text("", encoding="utf-8")
    answer = send_chat(settings(server, int(request["max_tokens"])), request)
    lines = server.prompt_log.read_text(encoding="utf-8").splitlines()
    prompts = [str(json.loads(line)["prompt"]) for line in lines]
    assert prompts, f"the server logged no prompt for the request:\n{server.output_tail()}"
    return answer, prompts


def tool_turn(call_id: str, name: str, arguments: str, result: str) -> list[dict[str, Any]]:
    """An assistant tool call and its result, as acode sends them back."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return [assistant_message("", [call]), tool_message(call_id, result)]


def assert_shown(prompt: str, name: str, arguments: str, result: str) -> None:
    assert f"<|im_start|>assistant\nfunctions.{name}:\n{arguments}\n<|im_end|>" in prompt, prompt
    assert f"<|im_start|>tool\n{result}<|im_end|>" in prompt, prompt


def assert_well_formed(calls: Sequence[Mapping[str, Any]], answer: ChatResponse) -> None:
    for call in parse_tool_calls(calls):
        assert isinstance(call, ToolCall), f"{call}\n{answer.raw}"


def test_the_model_sees_a_failed_tool_call_and_may_call_tools(model: LlamaServer) -> None:
    messages = [
        system_message("shop"),
        {"role": "user", "content": f"{TASK}. Use the tools."},
        *tool_turn("call_0", "edit_file", EDIT_ARGUMENTS, EDIT_RESULT),
    ]
    request = build_chat_payload(settings(model, 128), messages, TASK_TOOLS, TASK_TOOL_CHOICE)

    answer, prompts = ask(model, request)

    assert_shown(prompts[0], "edit_file", EDIT_ARGUMENTS, EDIT_RESULT)
    # "auto" lets the model answer in words; whichever it chose must be well-formed.
    if answer.tool_calls:
        assert answer.finish_reason == "tool_calls", answer.raw
        assert_well_formed(answer.tool_calls, answer)
    else:
        assert answer.finish_reason in ("stop", "length"), answer.raw


def test_the_model_sees_the_plan_feedback_and_plans_again(model: LlamaServer) -> None:
    tool = plan_tool(max_tasks=1, max_steps=1)
    bad_plan = json.dumps({"tasks": []})
    feedback = plan_feedback(["tasks: expected at least 1 item, got 0"])
    messages = [
        *planning_messages(TASK, "shop"),
        *tool_turn("call_0", "submit_plan", bad_plan, feedback),
    ]
    request = build_chat_payload(settings(model, 256), messages, (tool,), PLAN_TOOL_CHOICE)

    answer, prompts = ask(model, request)

    assert_shown(prompts[0], "submit_plan", bad_plan, feedback)
    assert len(answer.tool_calls) == 1, answer.raw
    function = answer.tool_calls[0]["function"]
    assert function["name"] == "submit_plan", answer.raw
    assert isinstance(json.loads(function["arguments"]), dict), answer.raw
