"""The logging proxy the real-model tests read: it forwards to a real HTTP server and logs
each request with the hash acode records for it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from acode.domain.config import ModelSettings
from acode.errors import ModelError
from acode.system.model_client import build_chat_payload, chat, list_models, request_hash
from tests.support.fake_openai import FakeOpenAI
from tests.support.logging_proxy import LoggingProxy, canonical_sha256, read_proxy_log

REPO = Path(__file__).resolve().parents[2]
MESSAGES = ({"role": "user", "content": "Say hello, café"},)


def _settings(base_url: str) -> ModelSettings:
    return ModelSettings(base_url=base_url, name="fake-model", seed=42, max_tokens=16)


def test_forwards_and_logs_the_hash_acode_records(tmp_path: Path) -> None:
    with FakeOpenAI() as fake, LoggingProxy(fake.base_url, tmp_path / "log.jsonl") as proxy:
        settings = _settings(proxy.base_url)
        assert list_models(settings) == ["fake-model"]
        answer = chat(settings, MESSAGES)
        logged = proxy.requests()

    assert answer.content == "echo: Say hello, café"
    assert [(e["n"], e["method"], e["path"], e["status"]) for e in logged] == [
        (1, "GET", "/v1/models", 200),
        (2, "POST", "/v1/chat/completions", 200),
    ]
    models, completion = logged
    assert models["request"] is None
    assert models["request_sha256"] is None
    assert models["response"]["data"][0]["id"] == "fake-model"
    assert completion["request"] == build_chat_payload(settings, MESSAGES)
    assert completion["request_sha256"] == request_hash(build_chat_payload(settings, MESSAGES))
    assert completion["response"]["choices"][0]["message"]["content"] == answer.content
    assert completion["ts"] >= models["ts"]
    assert [r["body"] for r in fake.requests][1] == completion["request"]


def test_an_upstream_error_is_passed_on_and_logged(tmp_path: Path) -> None:
    with FakeOpenAI() as fake, LoggingProxy(fake.base_url, tmp_path / "log.jsonl") as proxy:
        fake.script([{"status": 500, "body": "boom"}])
        body = json.dumps({"model": "fake-model", "messages": list(MESSAGES)}).encode()
        request = urllib.request.Request(
            f"{proxy.base_url}/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=5)
        assert raised.value.code == 500
        raised.value.close()
        (entry,) = proxy.requests()
    assert entry["status"] == 500
    assert entry["request_sha256"] == canonical_sha256(json.loads(body))


def test_an_unreachable_upstream_is_a_logged_502(tmp_path: Path) -> None:
    with FakeOpenAI() as fake:
        gone = fake.base_url  # nothing listens there once it stopped
    with LoggingProxy(gone, tmp_path / "log.jsonl") as proxy:
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"{proxy.base_url}/models", timeout=5)
        assert raised.value.code == 502
        raised.value.close()
        (entry,) = proxy.requests()
    assert entry["status"] == 502
    assert "upstream unreachable" in entry["response"]["error"]


def test_a_request_whose_client_gave_up_is_still_answered_and_logged(tmp_path: Path) -> None:
    with FakeOpenAI() as fake, LoggingProxy(fake.base_url, tmp_path / "log.jsonl") as proxy:
        fake.script([{"delay": 0.5, "content": "late"}])
        impatient = replace(_settings(proxy.base_url), timeout_seconds=0.05)
        with pytest.raises(ModelError):
            chat(impatient, MESSAGES)
        assert not proxy.wait_idle(0)
        assert proxy.wait_idle(5)
        (entry,) = proxy.requests()
    assert entry["status"] == 200
    assert entry["response"]["choices"][0]["message"]["content"] == "late"
    assert entry["request_sha256"] == request_hash(build_chat_payload(impatient, MESSAGES))


def test_only_v1_is_forwarded(tmp_path: Path) -> None:
    with FakeOpenAI() as fake, LoggingProxy(fake.base_url, tmp_path / "log.jsonl") as proxy:
        url = proxy.base_url.removesuffix("/v1") + "/admin"
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(url, timeout=5)
        assert raised.value.code == 404
        raised.value.close()
        assert proxy.requests() == []
    assert fake.requests == []


def test_runs_as_a_process_of_its_own(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with FakeOpenAI() as fake:
        command = ["-m", "tests.support.logging_proxy", "--upstream", fake.base_url]
        proc = subprocess.Popen(
            [sys.executable, *command, "--log", str(log), "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith("PORT "), first
            settings = _settings(f"http://127.0.0.1:{int(first.split()[1])}/v1")
            chat(settings, MESSAGES)
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
    assert proc.returncode == 0
    (entry,) = read_proxy_log(log)
    assert entry["request_sha256"] == request_hash(build_chat_payload(settings, MESSAGES))
