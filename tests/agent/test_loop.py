"""The agent loop against a scripted OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.agent.conversation import SUMMARY_PREFIX, dangling_tool_calls
from acode.agent.loop import run_agent
from acode.domain.config import AcodeConfig, AgentSettings, ModelSettings, Price
from acode.domain.states import SessionState
from acode.engine.catalog import model_usage
from acode.engine.lifecycle import start_session
from acode.errors import ModelError, StepFailedError
from acode.operations.inspection import read_store
from acode.system.model_client import request_hash
from tests.agent.scenario import PLAN, TASK, VALIDATE_PY, expected_login, rules, start_repository
from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def repo(workspace: Path) -> Path:
    start_repository(workspace)
    return workspace


def _config(fake: FakeOpenAI, **agent: Any) -> AcodeConfig:
    return AcodeConfig(
        model=ModelSettings(base_url=fake.base_url, name="fake-model", seed=7),
        agent=replace(AgentSettings(), **agent),
    )


def _run(ws: Path, config: AcodeConfig) -> SessionState:
    with start_session("agent", ws, config, agent_task=TASK) as session:
        return run_agent(session, TASK)


def _bodies(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.chat_requests]


def test_a_task_is_planned_and_done_with_every_tool_call_a_step(
    fake: FakeOpenAI, repo: Path
) -> None:
    fake.converse(rules())
    shown: list[object] = []
    with start_session("agent", repo, _config(fake), agent_task=TASK) as session:
        assert run_agent(session, TASK, on_plan=shown.append) is SessionState.COMPLETED
        sid = session.id

    assert (repo / "src/validate.py").read_text() == VALIDATE_PY
    assert (repo / "src/login.py").read_text() == expected_login()
    bodies = _bodies(fake)
    assert len(bodies) == 6  # the plan, three turns of t1, two of t2
    assert [len(s.tasks) for s in shown] == [2]  # type: ignore[attr-defined]
    for body in bodies:
        assert dangling_tool_calls(body["messages"]) == ()
        assert body["seed"] == 7
    assert bodies[0]["tool_choice"]["function"]["name"] == "submit_plan"
    assert all(b["tool_choice"] == "auto" for b in bodies[1:])
    # Tool results went back as tool messages answering each call by its id.
    last = bodies[-1]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["b1", "b2"]
    assert last[-1]["content"].startswith("exit code 0")
    with read_store(repo) as store:
        assert store is not None
        row = store.session(sid)
        assert row.kind == "agent"
        kinds = [s.kind for s in store.steps(row.sid)]
        transcript = [json.loads(m.content)["role"] for m in store.messages(row.sid)]
    assert kinds == [
        "model", "python",  # plan.1, plan
        "model", "read", "model", "write", "model",  # t1: read, write, finish
        "model", "edit", "run", "model",  # t2
    ]  # fmt: skip
    assert transcript.count("assistant") == 6
    assert "tool" in transcript


def test_a_model_outage_mid_conversation_resumes_without_asking_again(
    fake: FakeOpenAI, repo: Path
) -> None:
    fake.converse(rules())
    config = _config(fake)
    with (
        pytest.raises(ModelError),
        start_session("agent", repo, config, agent_task=TASK) as session,
    ):
        sid = session.id
        real_chat = session.chat
        calls = {"n": 0}

        def chat_until_the_fourth(*args: Any, **kwargs: Any) -> dict[str, Any]:
            # The fourth request dies unanswered: plan and two turns of t1 are recorded.
            calls["n"] += 1
            if calls["n"] == 4:
                raise ModelError("the server went away")
            return real_chat(*args, **kwargs)

        session.chat = chat_until_the_fourth  # type: ignore[method-assign]
        run_agent(session, TASK)
    sent_before = Counter(request_hash(b) for b in _bodies(fake))

    with acode.resume_session(sid, repo, config) as resumed:
        assert run_agent(resumed, TASK) is SessionState.COMPLETED
    sent = Counter(request_hash(b) for b in _bodies(fake))
    assert all(n == 1 for n in sent.values()), "an answered request was sent again"
    assert len(sent) == 6
    assert set(sent_before) <= set(sent)
    assert (repo / "src/login.py").read_text() == expected_login()


def test_an_invalid_plan_is_sent_back_with_the_problems(fake: FakeOpenAI, repo: Path) -> None:
    good = rules()
    good[0] = {
        "tool": "submit_plan",
        "replies": [
            {"tool_calls": [{"id": "p1", "name": "submit_plan", "arguments": {"tasks": []}}]},
            {"tool_calls": [{"id": "p2", "name": "submit_plan", "arguments": PLAN}]},
        ],
    }
    fake.converse(good)
    assert _run(repo, _config(fake)) is SessionState.COMPLETED
    second = _bodies(fake)[1]["messages"]
    feedback = [m for m in second if m["role"] == "tool"]
    assert feedback
    assert feedback[0]["tool_call_id"] == "p1"
    assert "tasks" in feedback[0]["content"]


def test_a_model_that_never_plans_fails_the_session_clearly(fake: FakeOpenAI, repo: Path) -> None:
    fake.converse([{"tool": "submit_plan", "replies": ["I will not plan."] * 5}])
    with pytest.raises(StepFailedError, match="no valid plan in 2 attempt"):
        with start_session("agent", repo, _config(fake, plan_attempts=2), agent_task=TASK) as s:
            sid = s.id
            run_agent(s, TASK)
    assert len(fake.chat_requests) == 2
    assert "not valid" in _bodies(fake)[1]["messages"][-1]["content"]
    with read_store(repo) as store:
        assert store is not None
        assert store.session(sid).state == SessionState.FAILED.value


def test_paths_outside_the_workspace_are_refused_to_the_model(fake: FakeOpenAI, repo: Path) -> None:
    escape = {"path": "../outside.txt", "content": "x"}
    fake.converse(
        [
            rules()[0],
            {
                "match": "Now do task t1:",
                "replies": [
                    {"tool_calls": [{"id": "e1", "name": "write_file", "arguments": escape}]},
                    {
                        "tool_calls": [
                            {"id": "e2", "name": "read_file", "arguments": {"path": "nope"}}
                        ]
                    },
                    {"tool_calls": [{"id": "e3", "name": "shred", "arguments": {}}]},
                    {
                        "tool_calls": [
                            {
                                "id": "e4",
                                "name": "write_file",
                                "arguments": {"path": ".agent/state/acode.db", "content": ""},
                            }
                        ]
                    },
                    "done",
                ],
            },
            {"match": "Now do task t2:", "replies": ["nothing to do"]},
        ]
    )
    assert _run(repo, _config(fake)) is SessionState.COMPLETED
    assert not (repo.parent / "outside.txt").exists()
    answers = [m for m in _bodies(fake)[5]["messages"] if m["role"] == "tool"]
    assert "leads outside the workspace" in answers[0]["content"]
    assert answers[1]["content"].startswith("error:")  # a missing file is the model's to fix
    assert "unknown tool 'shred'" in answers[2]["content"]
    assert "acode's or git's own state" in answers[3]["content"]
    assert (repo / ".agent/state/acode.db").stat().st_size > 0


def test_a_task_without_an_end_fails_after_max_turns(fake: FakeOpenAI, repo: Path) -> None:
    loop = {"tool_calls": [{"name": "read_file", "arguments": {"path": "src/login.py"}}]}
    fake.converse([rules()[0], {"match": "Now do task t1:", "replies": [loop] * 10}])
    with pytest.raises(StepFailedError, match="not finished within 3 model turns"):
        _run(repo, _config(fake, max_turns=3))
    assert len(fake.chat_requests) == 1 + 3


def test_a_long_conversation_is_compacted_by_a_recorded_step(fake: FakeOpenAI, repo: Path) -> None:
    (repo / "big.txt").write_text("lorem ipsum " * 400)
    read_big = {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]}
    fake.converse(
        [
            rules()[0],
            # Compaction changes the turn count the fake keys on: the summary ends the task.
            {"match": SUMMARY_PREFIX, "replies": ["done"] * 6},
            {"match": "Now do task t1:", "replies": [read_big] * 6},
            {"match": "Now do task t2:", "replies": ["nothing"]},
        ]
    )
    config = _config(fake, max_turns=6)
    config = replace(config, model=replace(config.model, context_tokens=3000, max_tokens=200))
    with start_session("agent", repo, config, agent_task=TASK) as session:
        assert run_agent(session, TASK) is SessionState.COMPLETED
        sid = session.id
    compacted = [b for b in _bodies(fake) if any(
        str(m.get("content", "")).startswith(SUMMARY_PREFIX) for m in b["messages"]
    )]  # fmt: skip
    assert compacted, "no request was compacted"
    with read_store(repo) as store:
        assert store is not None
        steps = [s.step_id for s in store.steps(store.session(sid).sid)]
    assert any(".compact" in s for s in steps)


def test_tokens_and_cost_add_up_per_session(fake: FakeOpenAI, repo: Path) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    script = rules()
    for rule in script:
        rule["replies"] = [
            ({"content": r} if isinstance(r, str) else r) | {"usage": usage}
            for r in rule["replies"]
        ]
    fake.converse(script)
    config = replace(_config(fake), pricing={"fake-model": Price(input=2.0, output=10.0)})
    with start_session("agent", repo, config, agent_task=TASK) as session:
        run_agent(session, TASK)
        sid = session.id
    with read_store(repo) as store:
        assert store is not None
        total = model_usage(store, store.session(sid))
    assert (total.calls, total.prompt_tokens, total.completion_tokens) == (6, 6000, 600)
    assert total.cost_usd == pytest.approx(6 * (1000 * 2.0 + 100 * 10.0) / 1e6)
