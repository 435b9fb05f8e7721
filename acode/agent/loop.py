"""The agent loop: ask the model for a plan, then work through it task by task.

Every model call is a ``chat`` step and every tool call a step of its kind, so the
loop is replayed on resume like any program over a session: completed calls return
their recorded answers without reaching the model, and the conversation is rebuilt
from them exactly as it was. A tool call whose step was interrupted is put right by
its kind (rolled back or retried) before its result is added, so the model never sees
an assistant turn whose tool calls have no results. Nothing here reads the clock or
the disk except through steps, which is what makes the replay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acode.agent.conversation import (
    assistant_message,
    compact,
    dangling_tool_calls,
    estimate_tokens,
    planning_messages,
    system_message,
    task_message,
    tool_message,
)
from acode.agent.plan_schema import AgentPlan, AgentTask, plan_feedback, validate_plan
from acode.agent.tools import (
    PLAN_TOOL_CHOICE,
    TASK_TOOL_CHOICE,
    TASK_TOOLS,
    BadToolCall,
    ToolCall,
    parse_tool_calls,
    path_problem,
    plan_tool,
    relative_path,
)
from acode.domain.states import SessionState
from acode.engine.session import Session
from acode.errors import StepFailedError
from acode.system.model_client import build_chat_payload, request_hash
from acode.system.process import CommandResult

__all__ = ["PlanShown", "run_agent"]

# What one tool result may put into the conversation; the step keeps all of it.
_TOOL_TEXT_LIMIT = 12_000

# acode's log and git's repository are not the agent's to touch.
_OFF_LIMITS = frozenset({".agent", ".git"})

# The latest assistant turn and its tool results are never compacted away.
_KEEP_LAST = 2

# Called with the plan once it is known, whether new or replayed.
PlanShown = Callable[[AgentPlan], None]


@dataclass
class _Conversation:
    """The messages of one request series, and those the transcript has not seen yet."""

    messages: list[dict[str, Any]]
    unsent: list[dict[str, Any]] = field(default_factory=list)

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.unsent.append(message)


def run_agent(session: Session, task: str, *, on_plan: PlanShown | None = None) -> SessionState:
    """Plan and execute ``task``; returns COMPLETED, or CANCELLED when the plan was not
    approved (``agent.approve_plan``). Pauses, pending approvals, model outages and
    failures propagate."""
    plan = _plan(session, task)
    if on_plan is not None:
        on_plan(plan)
    if session.config.agent.approve_plan:
        question = f"Execute this plan of {len(plan.tasks)} task(s)?"
        if not session.approve("plan.approve", question, subject=plan.to_dict()):
            session.cancel("the plan was not approved")
            return SessionState.CANCELLED
    for index, agent_task in enumerate(plan.tasks):
        _work_on(session, task, plan, index, agent_task)
    session.complete()
    return SessionState.COMPLETED


def _ask(
    session: Session,
    step_id: str,
    talk: _Conversation,
    tools: tuple[dict[str, Any], ...],
    tool_choice: object,
    *,
    task: str | None,
    title: str,
) -> dict[str, Any]:
    dangling = dangling_tool_calls(talk.messages)
    if dangling:  # a bug in this loop, never something to send
        raise AssertionError(f"tool calls without results: {', '.join(dangling)}")
    request = build_chat_payload(session.config.model, talk.messages, tools, tool_choice)
    answer = session.chat(
        step_id,
        request,
        request_hash(request),
        new_messages=talk.unsent,
        task=task,
        title=title,
    )
    talk.unsent = []
    talk.messages.append(assistant_message(answer.get("content"), answer.get("tool_calls") or []))
    return answer


def _plan(session: Session, task: str) -> AgentPlan:
    settings = session.config.agent
    talk = _Conversation([])
    for message in planning_messages(task, session.workspace.name):
        talk.add(message)
    problems: tuple[str, ...] = ()
    tool = plan_tool(settings.max_tasks, settings.max_steps)
    for attempt in range(1, settings.plan_attempts + 1):
        answer = _ask(
            session,
            f"plan.{attempt}",
            talk,
            (tool,),
            PLAN_TOOL_CHOICE,
            task=None,
            title=f"ask the model for a plan (attempt {attempt})",
        )
        calls = answer.get("tool_calls") or []
        raw = _function_arguments(calls[0]) if calls else answer.get("content") or ""
        plan, problems = validate_plan(
            raw, max_tasks=settings.max_tasks, max_steps_per_task=settings.max_steps
        )
        if plan is not None:
            return _record_plan(session, plan)
        feedback = plan_feedback(problems)
        for call in parse_tool_calls(calls):
            talk.add(tool_message(call.id, feedback))
        if not calls:
            talk.add({"role": "user", "content": feedback})
    raise StepFailedError(
        f"the model gave no valid plan in {settings.plan_attempts} attempt(s); last problems: "
        + "; ".join(problems),
        hint="use a model that supports tool calls (model.name), or raise agent.plan_attempts "
        "in .agent/config.yml; docs/agent.md shows the plan schema",
    )


def _record_plan(session: Session, plan: AgentPlan) -> AgentPlan:
    accepted = plan.to_dict()
    recorded = session.step("plan", lambda ctx: accepted, input=accepted, title="record the plan")
    return AgentPlan.from_dict(recorded)


def _function_arguments(call: Mapping[str, Any]) -> object:
    function = call.get("function")
    return function.get("arguments", "") if isinstance(function, Mapping) else ""


def _work_on(
    session: Session, request: str, plan: AgentPlan, index: int, agent_task: AgentTask
) -> None:
    tid = agent_task.id
    settings = session.config
    talk = _Conversation([])
    talk.add(system_message(session.workspace.name))
    talk.add(task_message(request, plan, index))
    budget = settings.model.context_tokens - settings.model.max_tokens
    for turn in range(1, settings.agent.max_turns + 1):
        if estimate_tokens(talk.messages) > budget:
            _compact(session, f"{tid}.compact{turn}", talk, budget, tid)
        answer = _ask(
            session,
            f"{tid}.turn{turn}",
            talk,
            TASK_TOOLS,
            TASK_TOOL_CHOICE,
            task=tid,
            title=f"{agent_task.title}: model turn {turn}",
        )
        calls = parse_tool_calls(answer.get("tool_calls") or [])
        if not calls:
            return  # an answer without tool calls is the model's last word on the task
        finished = False
        for number, call in enumerate(calls, start=1):
            text, done = _use_tool(session, f"{tid}.turn{turn}.{number}", call, tid)
            talk.add(tool_message(call.id, text))
            finished = finished or done
        if finished:
            return
    raise StepFailedError(
        f"task {tid} ({agent_task.title!r}) was not finished within {settings.agent.max_turns} "
        "model turns",
        hint="raise agent.max_turns in .agent/config.yml (or --max-turns), or split the task",
    )


def _compact(session: Session, step_id: str, talk: _Conversation, budget: int, tid: str) -> None:
    """Replace the middle of the conversation by a recorded, deterministic summary."""
    before = list(talk.messages)
    compacted = session.step(
        step_id,
        lambda ctx: compact(before, budget_tokens=budget, keep_last=_KEEP_LAST),
        input={"conversation": request_hash({"messages": before}), "budget": budget},
        task=tid,
        title=f"compact the conversation to {budget} tokens",
    )
    talk.messages = [dict(m) for m in compacted]
    summary = [m for m in talk.messages if m not in before]
    talk.unsent = [*summary, *(m for m in talk.unsent if m in talk.messages)]


def _use_tool(
    session: Session, step_id: str, call: ToolCall | BadToolCall, tid: str
) -> tuple[str, bool]:
    """Run one tool call as a step: (the text the model gets back, whether the task is
    finished). A step that fails is the model's to handle: its error is the result."""
    if isinstance(call, BadToolCall):
        return f"error: {call.error}", False
    args = call.arguments
    if call.name == "finish_task":
        return "ok: task finished", True
    if call.name == "run_command":
        command = str(args["command"])
        return _attempt(lambda: _command_text(session.run(f"{step_id}.run", command, task=tid)))
    rel = relative_path(str(args["path"]))
    if rel is None:
        problem = path_problem(str(args["path"])) or "the path names the repository root"
        return f"error: {problem}; use a path of a file relative to the repository root", False
    if rel.split("/")[0] in _OFF_LIMITS:
        return f"error: {rel} is acode's or git's own state; leave it alone", False
    if call.name == "read_file":
        return _attempt(lambda: session.read(f"{step_id}.read", rel, task=tid))
    if call.name == "write_file":
        content = str(args["content"])
        return _attempt(
            lambda: _done(session.write(f"{step_id}.write", rel, content, task=tid), rel)
        )
    if call.name == "edit_file":
        old, new = str(args["old"]), str(args["new"])
        return _attempt(
            lambda: _done(session.edit(f"{step_id}.edit", rel, old, new, task=tid), rel)
        )
    raise AssertionError(f"parse_tool_calls let through the unknown tool {call.name!r}")


def _attempt(action: Callable[[], str]) -> tuple[str, bool]:
    try:
        text = action()
    except StepFailedError as failure:
        text = f"error: {failure.message}"
    if len(text) > _TOOL_TEXT_LIMIT:
        text = text[:_TOOL_TEXT_LIMIT] + f"\n[... {len(text) - _TOOL_TEXT_LIMIT} more characters]"
    return text, False


def _done(result: Mapping[str, Any], rel: str) -> str:
    size = result.get("size")
    return f"ok: {rel} written" + (f" ({size} bytes)" if isinstance(size, int) else "")


def _command_text(result: CommandResult | Mapping[str, Any]) -> str:
    data = result.to_json() if isinstance(result, CommandResult) else result
    parts = [f"exit code {data.get('exit_code')}"]
    for stream in ("stdout", "stderr"):
        text = str(data.get(stream) or "").strip()
        if text:
            parts.append(f"{stream}:\n{text}")
    return "\n".join(parts)
