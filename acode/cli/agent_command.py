"""`acode run "task"`: an agent session that plans and works with an OpenAI-compatible model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from acode.cli.console import emit_json, emit_started, out_console
from acode.cli.driver import drive, never_asks, terminal_approver
from acode.cli.progress import choose_observer, quiet_screen
from acode.domain.config import AcodeConfig, override
from acode.domain.states import SessionState
from acode.engine.observer import Observer
from acode.errors import ConfigError, EnvironmentValidationError

if TYPE_CHECKING:
    from acode.agent.plan_schema import AgentPlan
    from acode.engine.session import Session
    from acode.resume.modes import StartMode

__all__ = ["AGENT_FLAGS", "AgentRequest", "agent_body", "run_agent_command", "task_title"]

# The setting each `acode run` flag replaces, recorded with the session so that
# `acode resume` runs with the same settings.
AGENT_FLAGS: Mapping[str, str] = {
    "model.name": "--model",
    "model.base_url": "--base-url",
    "agent.max_turns": "--max-turns",
    "agent.approve_plan": "--approve-plan",
}

_TITLE_LENGTH = 72


@dataclass(frozen=True)
class AgentRequest:
    workspace: Path
    task: str
    overrides: Mapping[str, object]  # "section.key" -> value, from the flags given
    as_json: bool
    mode: StartMode


def task_title(task: str) -> str:
    """The session's title: the task's first line, shortened (masked first, so that a
    secret cut short does not lose the shape that would have had it masked)."""
    from acode.security.redaction import redact

    line = redact(task.strip().splitlines()[0] if task.strip() else task)
    return line if len(line) <= _TITLE_LENGTH else line[: _TITLE_LENGTH - 3] + "..."


def run_agent_command(req: AgentRequest, config: AcodeConfig) -> int:
    from acode.engine.interrupts import Interrupts
    from acode.engine.lifecycle import start_session
    from acode.resume.environment import check_model
    from acode.resume.modes import Mode

    for dotted, value in req.overrides.items():
        section, _, key = dotted.partition(".")
        try:
            config = override(config, section, key, value, AGENT_FLAGS[dotted])
        except ConfigError as exc:
            raise ConfigError(
                exc.message, hint=f"give {AGENT_FLAGS[dotted]} a valid value"
            ) from exc
    model = check_model(config)
    if model.problem is not None:
        hint = (
            "start the model server, or point model.base_url and model.name in "
            ".agent/config.yml (or --base-url/--model) at one that serves it"
        )
        if model.busy:
            hint = model.busy_hint("run the command again")
        raise EnvironmentValidationError(f"cannot start: {model.problem}", hint=hint)
    observer = choose_observer(req.as_json)
    with Interrupts().installed() as interrupts:
        session = start_session(
            task_title(req.task),
            req.workspace,
            config,
            agent_task=req.task,
            overrides=req.overrides,
            observer=observer,
            approver=never_asks
            if req.mode.mode is Mode.AUTOPILOT
            else terminal_approver(observer, req.workspace),
            interrupts=interrupts,
            mode=req.mode.mode.value,
            mode_chosen=req.mode.chosen,
        )
        if req.as_json:
            emit_started(
                {
                    "event": "started",
                    "id": session.id,
                    "task": req.task,
                    "model": model.name,
                }
            )
        else:
            out_console().print(
                f"Session {session.short_id} started: {session.title} (model {model.name} at "
                f"{model.base_url})",
                markup=False,
            )
        return drive(session, agent_body(req.task, req.as_json), as_json=req.as_json)


def agent_body(task: str, as_json: bool) -> Callable[[Session], SessionState]:
    """The session's work for ``drive``: the agent loop, showing the plan once known."""
    from acode.agent.loop import run_agent

    def body(session: Session) -> SessionState:
        return run_agent(session, task, on_plan=_plan_shower(session.observer, as_json))

    return body


def _plan_shower(observer: Observer, as_json: bool) -> Callable[[AgentPlan], None]:
    def show(plan: AgentPlan) -> None:
        if as_json:
            emit_json({"event": "plan", **plan.to_dict()})
            return
        with quiet_screen(observer):
            console = out_console()
            console.print(f"Plan ({len(plan.tasks)} tasks):", markup=False)
            for number, task in enumerate(plan.tasks, start=1):
                console.print(f"  {number}. {task.title}", markup=False)
                for step in task.steps:
                    console.print(f"     - {step.title}", markup=False)

    return show
