from __future__ import annotations

import datetime
import email.utils
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from acode.domain.config import ModelSettings
from acode.errors import ModelError
from acode.system.model_client import (
    build_chat_payload,
    busy_wait,
    chat,
    list_models,
    request_hash,
)
from tests.support.drip_server import MODEL as DRIP_MODEL
from tests.support.drip_server import DripServer
from tests.support.fake_openai import FakeOpenAI, read_request_log

REPO = Path(__file__).resolve().parents[2]
HELLO = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Say hi"}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(params=["http", "https"])
def tls(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ssl.SSLContext | None:
    """A DripServer's ``tls``: None, or a certificate for 127.0.0.1 from an authority
    this process trusts the way a person trusts their own (SSL_CERT_FILE, which the
    default context reads; acode has no option of its own for it)."""
    if request.param == "http":
        return None
    authority = trustme.CA()
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    return context


def settings_for(fake: FakeOpenAI, **changes: object) -> ModelSettings:
    return ModelSettings(base_url=fake.base_url, name="fake-model", **changes)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_content_usage_and_the_exact_request(fake: FakeOpenAI) -> None:
    fake.script(["hi there"])
    settings = settings_for(fake, temperature=0.3, max_tokens=50)
    response = chat(settings, HELLO)
    assert response.content == "hi there"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model == "fake-model"
    assert response.usage == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert response.raw["id"] == "chatcmpl-fake-1"
    [sent] = fake.requests
    assert sent["method"] == "POST"
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"] == build_chat_payload(settings, HELLO)
    assert sent["body"] == {
        "model": "fake-model",
        "messages": HELLO,
        "temperature": 0.3,
        "max_tokens": 50,
        "stream": False,
    }
    assert "authorization" not in sent["headers"]
    assert request_hash(sent["body"]) == request_hash(build_chat_payload(settings, HELLO))


def test_seed_is_sent_only_when_set(fake: FakeOpenAI) -> None:
    chat(settings_for(fake, seed=7), HELLO)
    assert fake.requests[0]["body"]["seed"] == 7
    assert "seed" not in build_chat_payload(settings_for(fake), HELLO)


def test_tool_calls_and_tools(fake: FakeOpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "read", "parameters": {}}}]
    fake.script([{"tool_calls": [{"name": "read", "arguments": {"path": "a.py"}}]}])
    response = chat(settings_for(fake), HELLO, tools=tools, tool_choice="auto")
    assert response.finish_reason == "tool_calls"
    assert response.content == ""
    [call] = response.tool_calls
    assert call["function"]["name"] == "read"
    assert json.loads(call["function"]["arguments"]) == {"path": "a.py"}
    body = fake.requests[0]["body"]
    assert body["tools"] == tools
    assert body["tool_choice"] == "auto"


def test_unscripted_requests_get_a_deterministic_echo(fake: FakeOpenAI) -> None:
    long = "x" * 100
    first = chat(settings_for(fake), [{"role": "user", "content": long}])
    second = chat(settings_for(fake), [{"role": "user", "content": long}])
    assert first.content == second.content == "echo: " + "x" * 60


def test_request_hash_is_canonical() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "é"}]}
    b = {"messages": [{"content": "é", "role": "user"}], "model": "m"}
    assert request_hash(a) == request_hash(b)
    assert request_hash(a) != request_hash({**a, "model": "n"})
    assert len(request_hash(a)) == 64


def test_bearer_token_from_the_named_variable(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test-123")
    chat(settings_for(fake, api_key_env="TEST_MODEL_KEY"), HELLO)
    chat(settings_for(fake, api_key_env="TEST_MODEL_KEY"), HELLO, api_key="explicit")
    first, second = fake.requests
    assert first["headers"]["authorization"] == "Bearer sk-test-123"
    assert second["headers"]["authorization"] == "Bearer explicit"


def test_a_missing_key_variable_fails_before_sending(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_MODEL_KEY", raising=False)
    with pytest.raises(ModelError, match="TEST_MODEL_KEY"):
        chat(settings_for(fake, api_key_env="TEST_MODEL_KEY"), HELLO)
    assert fake.requests == []


def test_server_error_status_with_body_excerpt(fake: FakeOpenAI) -> None:
    fake.script([{"status": 500, "body": "boom " + "y" * 1000}])
    with pytest.raises(ModelError) as info:
        chat(settings_for(fake), HELLO)
    message = info.value.message
    assert "HTTP 500" in message
    assert "boom" in message
    assert len(message) < 500  # only the first 300 characters of the body
    assert info.value.hint is not None
    assert len(fake.requests) == 1  # it may have been answered: never sent again


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_server_is_asked_again_after_the_wait_it_names(
    fake: FakeOpenAI, status: int
) -> None:
    busy = {"status": status, "body": "slow down", "headers": {"Retry-After": "0.3"}}
    fake.script([busy, busy, "at last"])
    started = time.monotonic()
    assert chat(settings_for(fake), HELLO).content == "at last"
    assert time.monotonic() - started >= 0.6
    assert [r["body"] for r in fake.chat_requests] == [
        build_chat_payload(settings_for(fake), HELLO)
    ] * 3


def test_a_server_busy_past_the_retries_fails_saying_how_often_it_was_asked(
    fake: FakeOpenAI,
) -> None:
    busy = {"status": 503, "body": "overloaded", "headers": {"Retry-After": "0"}}
    fake.script([busy] * 5)
    with pytest.raises(ModelError) as info:
        chat(settings_for(fake, retries=2), HELLO)
    assert "HTTP 503: " in info.value.message
    assert "sent this request 3 times (model.retries: 2)" in str(info.value.hint)
    assert len(fake.chat_requests) == 3


def test_no_retries_sends_once(fake: FakeOpenAI) -> None:
    fake.script([{"status": 429, "headers": {"Retry-After": "0"}}, "unused"])
    with pytest.raises(ModelError, match="HTTP 429") as info:
        chat(settings_for(fake, retries=0), HELLO)
    assert "sent this request 1 time (model.retries: 0)" in str(info.value.hint)
    assert len(fake.chat_requests) == 1


def _http_error(status: int, retry_after: str | None) -> ModelError:
    import email.message
    import urllib.error

    headers = email.message.Message()
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    error = ModelError("HTTP")
    error.__cause__ = urllib.error.HTTPError("http://x/v1", status, "busy", headers, None)
    return error


def test_the_wait_doubles_is_bounded_and_follows_retry_after() -> None:
    assert [busy_wait(_http_error(503, None), n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert busy_wait(_http_error(429, "2.5"), 0) == 2.5
    assert busy_wait(_http_error(503, None), 5_000) == 30  # model.retries may be large
    assert busy_wait(_http_error(429, "3600"), 0) == 30  # a wait that long is a pause
    assert busy_wait(_http_error(429, "-4"), 0) == 0
    assert busy_wait(_http_error(429, "soon"), 3) == 8  # unreadable: as if absent
    assert busy_wait(_http_error(429, "nan"), 0) == 1
    assert busy_wait(_http_error(429, "inf"), 1) == 2
    in_a_while = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=20)
    )
    assert 17 < (busy_wait(_http_error(503, in_a_while), 0) or 0) <= 20
    assert busy_wait(_http_error(500, "1"), 0) is None
    assert busy_wait(_http_error(404, None), 0) is None
    assert busy_wait(ModelError("cannot reach the model server"), 0) is None


def test_not_found_suggests_pulling_the_model(fake: FakeOpenAI) -> None:
    fake.script([{"status": 404, "body": 'model "nope" not found'}])
    with pytest.raises(ModelError) as info:
        chat(settings_for(fake), HELLO)
    assert "HTTP 404" in info.value.message
    assert "ollama pull fake-model" in str(info.value.hint)


def test_a_body_that_is_not_json_is_malformed(fake: FakeOpenAI) -> None:
    fake.script([{"malformed": True}])
    with pytest.raises(ModelError, match="malformed response"):
        chat(settings_for(fake), HELLO)


def _answer(content: str) -> str:
    return '{"choices": [{"message": {"role": "assistant", "content": ' + content + "}}]}"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_answer("NaN"), "NaN is not a JSON number"),
        (_answer("1e400"), "1e400 is out of range"),
        (_answer("[" * 100_000 + "]" * 100_000), "nested more than 100 levels deep"),
    ],
    ids=["nan", "infinity", "nested-100000-deep"],
)
def test_an_answer_acode_cannot_record_is_malformed_not_a_crash(
    fake: FakeOpenAI, body: str, problem: str
) -> None:
    """A hostile or broken server's answer is a ModelError (the session pauses), never a
    RecursionError or a value that fails later when it is recorded."""
    fake.script([{"raw": body}])
    with pytest.raises(ModelError) as info:
        chat(settings_for(fake), HELLO)
    assert problem in info.value.message
    assert "malformed response from the model server" in info.value.message


def test_a_lone_surrogate_in_the_answer_becomes_a_replacement_character(
    fake: FakeOpenAI,
) -> None:
    """JSON may escape half a UTF-16 pair (\\ud800), which no UTF-8 text can hold: once
    it failed the step as it was recorded, and with it the session."""
    fake.script([{"raw": _answer('"a\\ud800b \\ud83d\\ude00"')}])
    assert chat(settings_for(fake), HELLO).content == "a\ufffdb \U0001f600"


def test_json_without_choices_is_malformed(fake: FakeOpenAI) -> None:
    fake.script([{"status": 200, "body": "overloaded"}])  # an error object with status 200
    with pytest.raises(ModelError, match=r"malformed response.*overloaded"):
        chat(settings_for(fake), HELLO)


def test_an_unreachable_server_fails_quickly_with_advice() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        chat(ModelSettings(base_url=url), HELLO)
    assert time.monotonic() - started < 2
    text = str(info.value)
    assert f"cannot reach the model server at {url}/chat/completions" in text
    assert "connection refused" in text
    assert "ollama serve" in text
    assert "model.base_url" in text


def test_a_slow_server_times_out(fake: FakeOpenAI) -> None:
    fake.script([{"delay": 3, "content": "too late"}])
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        chat(settings_for(fake, timeout_seconds=0.5), HELLO)
    assert 0.4 < time.monotonic() - started < 2
    assert "no complete answer from the model server" in info.value.message
    assert "within 0.5 s (model.timeout_seconds)" in info.value.message
    assert len(fake.requests) == 1  # never retried behind the caller's back


def test_an_answer_within_the_deadline_is_read_whole(
    tls: ssl.SSLContext | None,
) -> None:
    with DripServer(interval=0, tls=tls) as server:
        settings = ModelSettings(base_url=server.base_url, name=DRIP_MODEL, timeout_seconds=10)
        response = chat(settings, HELLO)
    assert response.content.startswith("slow slow")


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status-line-and-headers"])
def test_a_server_that_drips_its_answer_is_cut_off_at_the_deadline(
    headers_too: bool, tls: ssl.SSLContext | None
) -> None:
    """model.timeout_seconds bounds the whole answer, over HTTP and TLS alike: each byte
    of a dripping server comes well within any socket time-out, so a bound per read
    would wait 30 s here."""
    from acode.errors import ModelBusyError

    with DripServer(interval=0.05, headers_too=headers_too, tls=tls) as server:
        settings = ModelSettings(base_url=server.base_url, name=DRIP_MODEL, timeout_seconds=1)
        started = time.monotonic()
        with pytest.raises(ModelBusyError) as info:
            chat(settings, HELLO)
        elapsed = time.monotonic() - started
        assert server.hung_up.wait(5), "the client never closed its connection"
    assert 0.9 < elapsed < 4, f"waited {elapsed:.1f} s for a 1 s deadline"
    assert "within 1 s (model.timeout_seconds)" in info.value.message
    assert server.requests == ["POST /v1/chat/completions"]  # never sent again


def test_the_availability_check_of_a_dripping_server_ends_in_its_time() -> None:
    """``acode resume`` and ``acode run`` ask for the list of models first: it too has a
    deadline, after which the model is unavailable."""
    from acode.domain.config import AcodeConfig, ResumeSettings
    from acode.resume.environment import check_model

    with DripServer(interval=0.05) as server:
        quick = ResumeSettings(validation_timeout_seconds=1)
        config = AcodeConfig(model=ModelSettings(base_url=server.base_url), resume=quick)
        started = time.monotonic()
        check = check_model(config)
        elapsed = time.monotonic() - started
        url = server.base_url
    assert 0.9 < elapsed < 4, f"waited {elapsed:.1f} s for a 1 s check"
    assert check.busy
    assert check.problem == (
        f"the model server at {url} accepted the connection but did not answer within 1.0 s"
    )


def test_a_silent_server_is_a_problem_not_a_pass() -> None:
    import socket

    from acode.domain.config import AcodeConfig, ResumeSettings
    from acode.errors import ModelBusyError
    from acode.resume.environment import MODEL_PROBE_SECONDS, check_model

    with socket.socket() as silent:  # takes connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(ModelBusyError):
            list_models(ModelSettings(base_url=url), timeout=0.3)
        quick = ResumeSettings(validation_timeout_seconds=0.3)
        check = check_model(AcodeConfig(model=ModelSettings(base_url=url), resume=quick))
        # The deadline of a resume's validation spent already: the probe's least time.
        late = check_model(AcodeConfig(model=ModelSettings(base_url=url)), until=0.0)
    assert check.busy
    assert check.problem is not None
    assert check.problem.endswith("accepted the connection but did not answer within 0.3 s")
    assert late.problem is not None
    assert late.problem.endswith(f"did not answer within {MODEL_PROBE_SECONDS:.1f} s")


def test_an_invalid_base_url_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="invalid model server URL"):
        chat(ModelSettings(base_url="localhost:11434/v1"), HELLO)


def test_list_models(fake: FakeOpenAI) -> None:
    assert list_models(settings_for(fake)) == ["fake-model"]
    with FakeOpenAI(models=["a", "b"]) as other:
        assert list_models(settings_for(other), timeout=1.0) == ["a", "b"]
    assert fake.requests[0]["path"] == "/v1/models"


def test_list_models_on_an_unreachable_server() -> None:
    with pytest.raises(ModelError, match="cannot reach"):
        list_models(ModelSettings(base_url=f"http://127.0.0.1:{free_port()}/v1"), timeout=1)


def test_requests_are_logged_as_json_lines(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with FakeOpenAI(log_path=log) as server:
        chat(settings_for(server), HELLO)
        list_models(settings_for(server))
    assert [r["path"] for r in read_request_log(log)] == ["/v1/chat/completions", "/v1/models"]


def test_importing_the_client_loads_no_http_machinery() -> None:
    code = (
        "import sys, acode.system.model_client\n"
        "print(sorted(m for m in ('urllib.request', 'http.client') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_fake_runs_as_a_process_until_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["scripted"]), encoding="utf-8")
    command = [sys.executable, "-m", "tests.support.fake_openai", "--port", "0"]
    command += ["--log", str(log), "--models", "a,b", "--script", str(script)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline().split()
        assert first[0] == "PORT"
        settings = ModelSettings(base_url=f"http://127.0.0.1:{first[1]}/v1")
        assert chat(settings, HELLO).content == "scripted"
        assert list_models(settings) == ["a", "b"]
        assert len(read_request_log(log)) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0


def test_a_proxy_in_the_environment_does_not_capture_a_local_server(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert chat(settings_for(fake), HELLO).content == "echo: Say hi"


def test_an_availability_check_of_any_length_works(fake: FakeOpenAI) -> None:
    """A validation_timeout_seconds far beyond an hour overflowed the clock's arithmetic
    (OverflowError) once the check's 5 s cap was gone: an hour is the most waited."""
    from acode.domain.config import AcodeConfig, ResumeSettings
    from acode.resume.environment import check_model

    endless = ResumeSettings(validation_timeout_seconds=1e11)
    check = check_model(AcodeConfig(model=settings_for(fake), resume=endless))
    assert (check.problem, check.busy) == (None, False)
