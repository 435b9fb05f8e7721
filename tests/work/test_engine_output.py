"""The engine output parsers on what the real CLIs printed (codex 0.169.0, Claude Code
2.1.197, aider 0.86.2), recorded offline against tests/support/engine_servers.py, and on
the edge cases those outputs imply."""

# The recorded outputs are kept verbatim, a printed line per literal, however long.
# ruff: noqa: E501

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from acode.work.engine_output import (
    MAX_TEXT,
    EngineTurn,
    parse_aider,
    parse_claude,
    parse_codex,
    parse_command,
    shorten,
)


class Recorded(NamedTuple):
    stdout: str
    stderr: str
    returncode: int


# -- recorded: (stdout, stderr, exit status) as the CLI printed them; paths made /tmp/project --

AIDER_FAIL401 = Recorded(
    (
        "\n"
        "Aider v0.86.2\n"
        "Model: openai/fake-model with whole edit format\n"
        "Git repo: none\n"
        "Repo-map: disabled\n"
        "Note: in-chat filenames are always relative to the git working dir, not the \n"
        "current working dir.\n"
        "Cur working dir: /tmp/project/ws\n"
        "Git working dir: /tmp/project\n"
        "\n"
        "litellm.AuthenticationError: AuthenticationError: OpenAIException - scripted \n"
        "failure FAIL401\n"
        "The API provider is not able to authenticate you. Check your API key.\n"
        "\n"
    ),
    "Warning: Input is not a terminal (fd=0).\n",
    0,
)

AIDER_RESUME = Recorded(
    (
        "\n"
        "Aider v0.86.2\n"
        "Model: openai/fake-model with whole edit format\n"
        "Git repo: none\n"
        "Repo-map: disabled\n"
        "Restored previous conversation history.\n"
        "Note: in-chat filenames are always relative to the git working dir, not the \n"
        "current working dir.\n"
        "Cur working dir: /tmp/project/ws\n"
        "Git working dir: /tmp/project\n"
        "\n"
        "echo: again\n"
        "\n"
        "Tokens: 217 sent, 2 received.\n"
    ),
    "Warning: Input is not a terminal (fd=0).\n",
    0,
)

AIDER_START = Recorded(
    (
        "\n"
        "Aider v0.86.2\n"
        "Model: openai/fake-model with whole edit format\n"
        "Git repo: none\n"
        "Repo-map: disabled\n"
        "Note: in-chat filenames are always relative to the git working dir, not the \n"
        "current working dir.\n"
        "Cur working dir: /tmp/project/ws\n"
        "Git working dir: /tmp/project\n"
        "\n"
        "echo: say hi\n"
        "\n"
        "Tokens: 213 sent, 3 received.\n"
    ),
    "Warning: Input is not a terminal (fd=0).\n",
    0,
)

CLAUDE_DOWN = Recorded(
    '{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"duration_ms":1778,"duration_api_ms":0,"num_turns":1,"result":"API Error: Unable to connect to API (ConnectionRefused)","stop_reason":"stop_sequence","session_id":"0199a000-0000-7000-8000-000000000098","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"ff032d8f-0bc5-477d-a77c-e713da23ad33"}\n',
    "",
    1,
)

CLAUDE_FAIL500 = Recorded(
    '{"type":"result","subtype":"success","is_error":true,"api_error_status":500,"duration_ms":2025,"duration_api_ms":0,"num_turns":1,"result":"API Error: 500 scripted failure FAIL500. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:39815).","stop_reason":"stop_sequence","session_id":"0199a000-0000-7000-8000-000000000099","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"09c5a993-9e11-461d-86bc-55287dbf31e7"}\n',
    "",
    1,
)

CLAUDE_IN_USE = Recorded(
    "",
    "Error: Session ID 0199a000-0000-7000-8000-000000000006 is already in use.\n",
    1,
)

CLAUDE_NON_UUID = Recorded(
    "",
    'Error: --resume requires a valid session ID or session title when used with --print. Usage: claude -p --resume <session-id|title>. Provided value "nosuch" is not a UUID and does not match any session title.\n',
    1,
)

CLAUDE_OTHER_CWD = Recorded(
    "",
    "No conversation found with session ID: 0199a000-0000-7000-8000-000000000006\n",
    1,
)

CLAUDE_RESUME = Recorded(
    '{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":138,"duration_api_ms":30,"ttft_ms":124,"ttft_stream_ms":122,"time_to_request_ms":108,"num_turns":1,"result":"echo: again","stop_reason":"end_turn","session_id":"0199a000-0000-7000-8000-000000000006","total_cost_usd":0.00007999999999999999,"usage":{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-opus-4-8[1m]":{"inputTokens":6,"outputTokens":2,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.00007999999999999999,"contextWindow":1000000,"maxOutputTokens":64000}},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"d29df8b2-fa01-4185-9bb2-4a48d344ee3e"}\n',
    "",
    0,
)

CLAUDE_START = Recorded(
    '{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":202,"duration_api_ms":73,"ttft_ms":139,"ttft_stream_ms":137,"time_to_request_ms":114,"num_turns":1,"result":"echo: say hi","stop_reason":"end_turn","session_id":"0199a000-0000-7000-8000-000000000006","total_cost_usd":0.000085,"usage":{"input_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-opus-4-8[1m]":{"inputTokens":2,"outputTokens":3,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.000085,"contextWindow":1000000,"maxOutputTokens":64000}},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"72fbac0c-fc22-434c-b510-e154efd526a5"}\n',
    "",
    0,
)

CODEX_DOWN = Recorded(
    (
        '{"type":"thread.started","thread_id":"01a21583-2589-7ef3-a175-ea8c26275287"}\n'
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}\n'
        '{"type":"turn.started"}\n'
        '{"type":"error","message":"Connection failed: error sending request"}\n'
        '{"type":"turn.failed","error":{"message":"Connection failed: error sending request"}}\n'
    ),
    "Reading additional input from stdin...\n",
    1,
)

CODEX_FAIL400 = Recorded(
    (
        '{"type":"thread.started","thread_id":"01a21582-b103-7b63-8bf7-ab826a51aa0c"}\n'
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}\n'
        '{"type":"turn.started"}\n'
        '{"type":"error","message":"{\\"error\\": {\\"message\\": \\"scripted failure FAIL400\\", \\"type\\": \\"fake_error\\", \\"code\\": \\"400\\"}}"}\n'
        '{"type":"turn.failed","error":{"message":"{\\"error\\": {\\"message\\": \\"scripted failure FAIL400\\", \\"type\\": \\"fake_error\\", \\"code\\": \\"400\\"}}"}}\n'
    ),
    "Reading additional input from stdin...\n",
    1,
)

CODEX_NON_UUID = Recorded(
    (
        '{"type":"thread.started","thread_id":"01a21582-adbd-78d1-bea9-1c087064895d"}\n'
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}\n'
        '{"type":"turn.started"}\n'
        '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"echo: x"}}\n'
        '{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":2,"reasoning_output_tokens":0}}\n'
    ),
    "",
    0,
)

CODEX_RESUME = Recorded(
    (
        '{"type":"thread.started","thread_id":"01a21582-a4f9-7972-907e-64da38066efc"}\n'
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}\n'
        '{"type":"turn.started"}\n'
        '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"echo: again"}}\n'
        '{"type":"turn.completed","usage":{"input_tokens":8,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":5,"reasoning_output_tokens":0}}\n'
    ),
    "",
    0,
)

CODEX_START = Recorded(
    (
        '{"type":"thread.started","thread_id":"01a21582-a4f9-7972-907e-64da38066efc"}\n'
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}\n'
        '{"type":"turn.started"}\n'
        '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"echo: say hi"}}\n'
        '{"type":"turn.completed","usage":{"input_tokens":2,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":3,"reasoning_output_tokens":0}}\n'
    ),
    "Reading additional input from stdin...\n",
    0,
)

CODEX_UNKNOWN_UUID = Recorded(
    "",
    (
        "Error: thread/resume: thread/resume failed: no rollout found for thread id 00000000-0000-7000-8000-000000000000 (code -32600)\n"
        "\n"
        "Stack backtrace:\n"
        "   0: <unknown>\n"
        "   1: <unknown>\n"
    ),
    1,
)

AIDER_DOWN = Recorded(
    (
        "\n"
        "Aider v0.86.2\n"
        "Model: openai/fake-model with whole edit format\n"
        "Git repo: none\n"
        "Repo-map: disabled\n"
        "Note: in-chat filenames are always relative to the git working dir, not the \n"
        "current working dir.\n"
        "Cur working dir: /tmp/project/ws\n"
        "Git working dir: /tmp/project\n"
        "\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 0.2 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 0.5 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 1.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 2.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 4.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 8.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 16.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "Retrying in 32.0 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
        "error.\n"
        "The API provider's servers are down or overloaded.\n"
        "\n"
    ),
    "Warning: Input is not a terminal (fd=0).\n",
    0,
)


CODEX_THREAD = "01a21582-a4f9-7972-907e-64da38066efc"
CLAUDE_SESSION = "0199a000-0000-7000-8000-000000000006"


# -- codex -------------------------------------------------------------------------------------


def test_codex_new_thread() -> None:
    turn = parse_codex(*CODEX_START, asked=None)

    # The "Model metadata ... not found" error item is a warning: the turn still counts.
    assert turn == EngineTurn(
        CODEX_THREAD, True, False, "echo: say hi", f"new thread {CODEX_THREAD}"
    )


def test_codex_resumed_thread() -> None:
    turn = parse_codex(*CODEX_RESUME, asked=CODEX_THREAD)

    assert turn == EngineTurn(CODEX_THREAD, True, False, "echo: again", f"resumed {CODEX_THREAD}")


def test_codex_resumed_thread_compares_ids_without_case() -> None:
    assert parse_codex(*CODEX_RESUME, asked=CODEX_THREAD.upper()).ok


def test_codex_unknown_uuid_is_forgotten() -> None:
    asked = "00000000-0000-7000-8000-000000000000"
    turn = parse_codex(*CODEX_UNKNOWN_UUID, asked=asked)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, True)
    assert turn.detail == f"no rollout found for {asked}"
    assert "no rollout found for thread id" in turn.text
    assert "backtrace" not in turn.text


def test_codex_new_thread_in_place_of_the_asked_one_is_forgotten() -> None:
    # A non-UUID: codex silently started an empty thread. Its id must not become the session.
    turn = parse_codex(*CODEX_NON_UUID, asked="nosuch")

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, True)
    assert "01a21582-adbd" in turn.detail
    assert "instead of resuming nosuch" in turn.detail


def test_codex_dead_server_fails_with_the_turn_error() -> None:
    turn = parse_codex(*CODEX_DOWN, asked=None)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, False)
    assert turn.text == "Connection failed: error sending request"
    assert turn.detail == "codex failed (exit 1): Connection failed: error sending request"


def test_codex_http_error_fails() -> None:
    turn = parse_codex(*CODEX_FAIL400, asked=None)

    assert (turn.ok, turn.forgotten) == (False, False)
    assert "scripted failure FAIL400" in turn.text


def test_codex_killed_before_any_output() -> None:
    turn = parse_codex("", "", -9, asked=None)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, False)
    assert turn.detail == "codex failed (exit -9): codex exited -9 without an answer"


def test_codex_a_completed_turn_after_an_exit_error_is_not_ok() -> None:
    stdout = CODEX_START.stdout + '{"type":"turn.failed","error":{"message":"later"}}\n'

    assert not parse_codex(stdout, "", 1, asked=None).ok


def test_codex_skips_lines_that_are_not_json() -> None:
    stdout = "some banner\n" + CODEX_START.stdout + "{broken\n"

    assert parse_codex(stdout, "", 0, asked=None).text == "echo: say hi"


# -- claude ------------------------------------------------------------------------------------


def test_claude_new_session() -> None:
    turn = parse_claude(*CLAUDE_START, asked=None)

    assert turn == EngineTurn(
        CLAUDE_SESSION, True, False, "echo: say hi", f"new session {CLAUDE_SESSION}"
    )


def test_claude_resumed_session() -> None:
    turn = parse_claude(*CLAUDE_RESUME, asked=CLAUDE_SESSION)

    assert turn == EngineTurn(
        CLAUDE_SESSION, True, False, "echo: again", f"resumed {CLAUDE_SESSION}"
    )


def test_claude_resumed_into_a_new_id_keeps_the_new_id() -> None:
    # Older Claude Code versions carried the history into a new id on --resume.
    turn = parse_claude(*CLAUDE_RESUME, asked="0199a000-0000-7000-8000-0000000000aa")

    assert (turn.session_id, turn.ok, turn.forgotten) == (CLAUDE_SESSION, True, False)
    assert turn.detail == f"resumed 0199a000-0000-7000-8000-0000000000aa as {CLAUDE_SESSION}"


@pytest.mark.parametrize("recorded", [CLAUDE_OTHER_CWD, CLAUDE_NON_UUID], ids=["cwd", "non-uuid"])
def test_claude_unknown_session_is_forgotten(recorded: Recorded) -> None:
    turn = parse_claude(*recorded, asked=CLAUDE_SESSION)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, True)
    assert turn.text == recorded.stderr.strip()


@pytest.mark.parametrize("recorded", [CLAUDE_DOWN, CLAUDE_FAIL500], ids=["down", "500"])
def test_claude_error_under_subtype_success_is_a_failure_without_a_session(
    recorded: Recorded,
) -> None:
    # The JSON says "subtype": "success" and carries a fresh session_id: neither counts.
    turn = parse_claude(*recorded, asked=None)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, False)
    assert turn.text.startswith("API Error:")
    assert turn.detail.startswith("claude failed (exit 1): API Error:")


def test_claude_is_error_with_exit_0_is_still_a_failure() -> None:
    assert parse_claude(CLAUDE_DOWN.stdout, "", 0, asked=None).ok is False


def test_claude_session_id_in_use_is_a_failure_not_forgotten() -> None:
    turn = parse_claude(*CLAUDE_IN_USE, asked=None)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, False)
    assert "is already in use" in turn.text


def test_claude_forgotten_is_only_for_a_resume() -> None:
    # "No conversation found" cannot happen to a new session; if it is printed, the turn
    # failed, and there is nothing to fall back from.
    turn = parse_claude(*CLAUDE_OTHER_CWD, asked=None)

    assert (turn.ok, turn.forgotten) == (False, False)


def test_claude_pretty_printed_json_is_read() -> None:
    pretty = json.dumps(json.loads(CLAUDE_START.stdout), indent=2)

    assert parse_claude(pretty, "", 0, asked=None).session_id == CLAUDE_SESSION


def test_claude_without_json() -> None:
    turn = parse_claude("", "Killed\n", -9, asked=None)

    assert (turn.ok, turn.text, turn.detail) == (False, "Killed", "claude failed (exit -9): Killed")


# -- aider -------------------------------------------------------------------------------------


def test_aider_new_chat() -> None:
    assert parse_aider(*AIDER_START, asked=None) == EngineTurn(
        None, True, False, "echo: say hi", "aider new chat"
    )


def test_aider_restored_chat() -> None:
    assert parse_aider(*AIDER_RESUME, asked="") == EngineTurn(
        None, True, False, "echo: again", "aider restored chat"
    )


def test_aider_model_error_with_exit_0_is_a_failure() -> None:
    turn = parse_aider(*AIDER_FAIL401, asked=None)

    assert (turn.session_id, turn.ok, turn.forgotten) == (None, False, False)
    assert turn.text.startswith("litellm.AuthenticationError:")
    assert "FAIL401" in turn.text


def test_aider_unreachable_model_with_exit_0_is_a_failure() -> None:
    turn = parse_aider(*AIDER_DOWN, asked=None)

    assert (turn.ok, turn.forgotten) == (False, False)
    assert "Connection" in turn.text
    assert "Retrying" not in turn.text
    assert turn.detail.startswith("aider failed (exit 0): litellm.InternalServerError")


def test_aider_answer_after_a_retried_error_is_ok() -> None:
    error = (
        "litellm.InternalServerError: InternalServerError: Connection error.\n"
        "Retrying in 0.2 seconds...\n"
    )
    stdout = AIDER_START.stdout.replace("\necho: say hi", "\n" + error + "echo: say hi")

    turn = parse_aider(stdout, "", 0, asked=None)

    assert turn.ok
    assert turn.text.endswith("echo: say hi")


def test_aider_answer_keeps_its_own_lines() -> None:
    answer = "Note: this line looks like a header\n\nand this is the end"
    stdout = AIDER_START.stdout.replace("echo: say hi", answer)

    assert parse_aider(stdout, "", 0, asked=None).text == answer


# -- command -----------------------------------------------------------------------------------


def test_command_ok_and_failed() -> None:
    assert parse_command("the answer\n", "", 0, session_id="w1") == EngineTurn(
        "w1", True, False, "the answer", "command exited 0"
    )
    failed = parse_command("partial", "boom\ntraceback end\n", 2, session_id="w1")
    assert (failed.session_id, failed.ok, failed.text) == (None, False, "boom\ntraceback end")
    assert failed.detail == "command failed (exit 2): traceback end"
    assert not failed.forgotten  # a new session: there was nothing to forget


def test_a_command_that_fails_when_asked_to_resume_has_forgotten() -> None:
    failed = parse_command("", "no session w1\n", 4, session_id="w1", asked="w1")
    assert (failed.session_id, failed.ok, failed.forgotten) == (None, False, True)
    assert failed.detail == "command failed (exit 4): no session w1"
    resumed = parse_command("again\n", "", 0, session_id="w1", asked="w1")
    assert (resumed.session_id, resumed.ok, resumed.forgotten) == ("w1", True, False)


# -- shortening --------------------------------------------------------------------------------


def test_shorten_keeps_the_start_and_the_end() -> None:
    text = "START " + "x" * 10_000 + " END"

    short = shorten(text)

    assert len(short) <= MAX_TEXT
    assert short.startswith("START ")
    assert short.endswith(" END")
    assert "[... shortened ...]" in short


def test_shorten_leaves_short_text_alone_but_stripped() -> None:
    assert shorten("  hello \n") == "hello"


def test_every_parser_shortens_a_long_answer() -> None:
    long = "y" * 9000
    codex = CODEX_START.stdout.replace("echo: say hi", long)
    claude = CLAUDE_START.stdout.replace("echo: say hi", long)
    aider = AIDER_START.stdout.replace("echo: say hi", long)

    for turn in (
        parse_codex(codex, "", 0, asked=None),
        parse_claude(claude, "", 0, asked=None),
        parse_aider(aider, "", 0, asked=None),
        parse_command(long, "", 0, session_id="w"),
    ):
        assert turn.ok
        assert len(turn.text) <= MAX_TEXT
