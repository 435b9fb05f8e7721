"""The model step against a real HTTP server: the conversation is recorded and restored,
and an answered request is never sent again."""

from __future__ import annotations

from pathlib import Path

import pytest

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.errors import ModelError
from tests.support.fake_openai import FakeOpenAI


def _config(fake: FakeOpenAI) -> AcodeConfig:
    return AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))


def test_answers_are_recorded_and_never_requested_again(workspace: Path) -> None:
    with FakeOpenAI() as fake:
        fake.script(["first answer", "second answer", "third answer"])
        s = acode.open_session("t", workspace=workspace, config=_config(fake))
        assert s.model("m1", "Question one?") == "first answer"
        assert s.model("m2", "Question two?") == "second answer"
        s.close()
        assert len(fake.chat_requests) == 2
        # The second request carried the first turn: the conversation grows.
        sent = fake.chat_requests[1]["body"]["messages"]
        assert [m["content"] for m in sent] == ["Question one?", "first answer", "Question two?"]

        with acode.resume_session(s.id, workspace=workspace, config=_config(fake)) as r:
            assert r.model("m1", "Question one?") == "first answer"
            assert r.model("m2", "Question two?") == "second answer"
            assert r.model("m3", "Question three?") == "third answer"
        assert len(fake.chat_requests) == 3
        # The restored conversation went out with the new request.
        sent = fake.chat_requests[2]["body"]["messages"]
        assert [m["content"] for m in sent][-2:] == ["second answer", "Question three?"]


def test_an_unanswered_request_is_sent_again_on_resume(workspace: Path) -> None:
    with FakeOpenAI() as fake:
        fake.script([{"status": 500, "body": "overloaded"}, "late answer"])
        s = acode.open_session("t", workspace=workspace, config=_config(fake))
        with pytest.raises(ModelError, match="500"):
            s.model("m1", "Anyone there?")
        s.close()
        assert s.state is acode.SessionState.EXECUTING  # not failed: resumable
        with acode.resume_session(s.id, workspace=workspace, config=_config(fake)) as r:
            assert r.model("m1", "Anyone there?") == "late answer"
        assert len(fake.chat_requests) == 2


def test_a_busy_server_is_waited_for_within_the_step(workspace: Path) -> None:
    with FakeOpenAI() as fake:
        busy = {"status": 429, "body": "rate limited", "headers": {"Retry-After": "0"}}
        fake.script([busy, busy, "answered"])
        s = acode.open_session("t", workspace=workspace, config=_config(fake))
        assert s.model("m1", "Anyone there?") == "answered"
        s.close()
        assert len(fake.chat_requests) == 3
        with acode.resume_session(s.id, workspace=workspace, config=_config(fake)) as r:
            assert r.model("m1", "Anyone there?") == "answered"  # recorded once
        assert len(fake.chat_requests) == 3


def test_an_unreachable_model_is_a_clear_failure(workspace: Path) -> None:
    config = AcodeConfig(
        model=ModelSettings(base_url="http://127.0.0.1:9/v1", name="x", timeout_seconds=2)
    )
    s = acode.open_session("t", workspace=workspace, config=config)
    with pytest.raises(ModelError, match="cannot reach the model server") as info:
        s.model("m1", "hello")
    assert "ollama serve" in str(info.value)
    s.close()
