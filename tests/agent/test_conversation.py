"""The conversation: its messages, its size, its dangling calls, and its compaction."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.agent.conversation import (
    SUMMARY_PREFIX,
    assistant_message,
    compact,
    dangling_tool_calls,
    estimate_tokens,
    planning_messages,
    system_message,
    task_message,
    tool_message,
)
from acode.agent.plan_schema import AgentPlan, AgentStep, AgentTask

BOUNDED = settings(max_examples=200, deadline=None)
# More than any summary in its shortest form costs: "(N earlier entries omitted)" and the prefix.
SUMMARY_ALLOWANCE = 40

PLAN = AgentPlan(
    (
        AgentTask("t1", "Read the code", (AgentStep("Open src/login.py"),)),
        AgentTask("t2", "Add validation", (AgentStep("Write it"), AgentStep("Test it"))),
        AgentTask("t3", "Commit", (AgentStep("Commit the change"),)),
    )
)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def head() -> list[dict[str, Any]]:
    return planning_messages("Add email validation", "demo")


def turn(n: int, result: str = "ok") -> list[dict[str, Any]]:
    """An assistant message with one tool call, and its result."""
    arguments = json.dumps({"path": f"src/file{n}.py", "content": "x = 1\n" * 20})
    return [
        assistant_message(f"Writing file {n}.", [call(f"c{n}", "write_file", arguments)]),
        tool_message(f"c{n}", result),
    ]


# -- messages --------------------------------------------------------------------------


def test_the_system_message_names_the_workspace_and_the_rules() -> None:
    message = system_message("shop")
    assert message["role"] == "system"
    content = message["content"]
    assert "repository shop" in content
    assert "relative to the repository root" in content
    assert "finish_task" in content


def test_planning_starts_with_the_system_message_and_the_request() -> None:
    messages = planning_messages("Add email validation", "shop")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0] == system_message("shop")
    assert "Add email validation" in messages[1]["content"]
    assert "submit_plan" in messages[1]["content"]


def test_the_task_message_marks_the_current_task() -> None:
    message = task_message("Add email validation", PLAN, 1)
    assert message["role"] == "user"
    assert message["content"] == (
        "The request: Add email validation\n"
        "\n"
        "The plan ([x] done, [>] current, [ ] to do):\n"
        "[x] t1. Read the code\n"
        "[>] t2. Add validation\n"
        "      - Write it\n"
        "      - Test it\n"
        "[ ] t3. Commit\n"
        "\n"
        "Now do task t2: Add validation. Use the tools; when this task is done, call "
        "finish_task with a one-line summary."
    )


@pytest.mark.parametrize("index", [-1, 3])
def test_a_task_index_outside_the_plan_is_refused(index: int) -> None:
    with pytest.raises(IndexError, match="outside a plan of 3 tasks"):
        task_message("x", PLAN, index)


def test_an_assistant_message_never_has_null_content() -> None:
    assert assistant_message(None, []) == {"role": "assistant", "content": ""}
    assert assistant_message("done", []) == {"role": "assistant", "content": "done"}


def test_assistant_tool_calls_are_normalized() -> None:
    message = assistant_message(
        None,
        [
            {"id": "a", "function": {"name": "read_file", "arguments": {"path": "x"}}},
            {"function": {"name": "run_command", "arguments": '{"command":"ls"}'}},
            {"id": "c", "type": "function", "function": {"name": "finish_task"}},
        ],
    )
    assert message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("a", "read_file", '{"path": "x"}'),
            call("call_1", "run_command", '{"command":"ls"}'),
            call("c", "finish_task", "{}"),
        ],
    }


def test_a_tool_message_answers_its_call() -> None:
    assert tool_message("c1", "ok") == {"role": "tool", "tool_call_id": "c1", "content": "ok"}


# -- size and dangling calls -------------------------------------------------------------


def test_the_estimate_counts_contents_arguments_and_messages() -> None:
    assert estimate_tokens([]) == 0
    assert estimate_tokens([{"role": "user", "content": "x" * 7}]) == 2 + 4
    assert estimate_tokens([{"role": "user", "content": "x" * 8}]) == 3 + 4
    message = assistant_message(None, [call("a", "f", "y" * 14)])
    assert estimate_tokens([message, tool_message("a", "z" * 7)]) == 6 + 8


def test_dangling_tool_calls() -> None:
    asked = assistant_message("", [call("a", "f", "{}"), call("b", "f", "{}")])
    assert dangling_tool_calls([*head(), asked]) == ("a", "b")
    assert dangling_tool_calls([*head(), asked, tool_message("b", "ok")]) == ("a",)
    answered = [*head(), asked, tool_message("b", "ok"), tool_message("a", "ok")]
    assert dangling_tool_calls(answered) == ()
    # A result before the call does not answer it.
    assert dangling_tool_calls([tool_message("a", "early"), asked, tool_message("b", "ok")]) == (
        "a",
    )


# -- compaction ------------------------------------------------------------------------


def test_within_the_budget_nothing_changes() -> None:
    messages = [*head(), *turn(1)]
    assert compact(messages, budget_tokens=10_000) == messages


def test_the_middle_becomes_one_summary() -> None:
    details = "\nmore" * 100
    messages = [*head(), *turn(1, f"wrote 120 bytes{details}"), *turn(2, f"ok{details}")]
    messages += [*turn(3), *turn(4)]
    out = compact(messages, budget_tokens=estimate_tokens(messages) - 1, keep_last=4)
    assert out[:2] == messages[:2]
    assert out[3:] == messages[-4:]
    assert out[2]["role"] == "user"
    assert out[2]["content"] == (
        f"{SUMMARY_PREFIX}\n"
        "- assistant: Writing file 1.\n"
        '- write_file(path="src/file1.py", content="x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 '
        'x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1") '
        "-> wrote 120 bytes\n"
        "- assistant: Writing file 2.\n"
        '- write_file(path="src/file2.py", content="x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 '
        'x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1 x = 1") -> ok'
    )


def test_a_tight_budget_shortens_the_summary_then_drops_its_earliest_lines() -> None:
    messages = [*head()]
    for n in range(30):
        messages += turn(n, f"result {n}")
    kept = [*messages[:2], *messages[-2:]]
    budget = estimate_tokens(kept) + 60
    out = compact(messages, budget_tokens=budget, keep_last=2)
    assert estimate_tokens(out) <= budget
    summary = out[2]["content"]
    assert summary.startswith(f"{SUMMARY_PREFIX}\n- (")
    assert "earlier entries omitted)" in summary
    assert summary.endswith("-> result 28")
    assert out[3:] == messages[-2:]


def test_the_kept_tail_is_never_dropped_even_over_budget() -> None:
    messages = [*head(), *turn(1), *turn(2)]
    out = compact(messages, budget_tokens=1, keep_last=2)
    assert out[:2] == messages[:2]
    assert out[-2:] == messages[-2:]
    assert out[2]["content"] == f"{SUMMARY_PREFIX}\n- (2 earlier entries omitted)"


def test_the_tail_widens_to_keep_a_call_with_its_results() -> None:
    asked = assistant_message("", [call("a", "read_file", '{"path": "x"}'), call("b", "f", "{}")])
    messages = [*head(), *turn(1), asked, tool_message("a", "A"), tool_message("b", "B")]
    out = compact(messages, budget_tokens=1, keep_last=1)
    assert out[-3:] == [asked, tool_message("a", "A"), tool_message("b", "B")]
    assert dangling_tool_calls(out) == ()


def test_a_second_compaction_carries_the_first_summary_over() -> None:
    messages = [*head(), *turn(1, "first"), *turn(2, "second"), *turn(3)]
    once = compact(messages, budget_tokens=estimate_tokens(messages) - 1, keep_last=2)
    grown = [*once, *turn(4), *turn(5)]
    twice = compact(grown, budget_tokens=estimate_tokens(grown) - 1, keep_last=2)
    summary = twice[2]["content"]
    assert summary.count(SUMMARY_PREFIX) == 1
    assert "-> first" in summary
    assert "-> second" in summary
    assert summary.index("-> first") < summary.index("-> second")


def test_nothing_to_summarize_leaves_the_messages_as_they_are() -> None:
    messages = [*head(), *turn(1)]
    assert compact(messages, budget_tokens=1, keep_last=2) == messages
    assert compact(messages[:1], budget_tokens=1) == messages[:1]


def test_unanswered_calls_and_odd_messages_are_summarized_too() -> None:
    messages = [
        *head(),
        assistant_message(None, [call("q", "run_command", "not json")]),
        tool_message("zzz", "orphan result\n" + "x" * 1000),
        {"role": "user", "content": "Your plan was not valid"},
        assistant_message("done", []),
    ]
    out = compact(messages, budget_tokens=estimate_tokens(messages) - 1, keep_last=1)
    assert out[2]["content"] == (
        f"{SUMMARY_PREFIX}\n"
        "- run_command(not json) -> (no result)\n"
        "- tool result: orphan result\n"
        "- user: Your plan was not valid"
    )


# -- properties ------------------------------------------------------------------------

TEXT = st.text(max_size=60)
# Results run longer than the rest, as file contents and command outputs do.
RESULT = st.lists(TEXT, max_size=6).map("\n".join)
NAMES = st.sampled_from(["read_file", "write_file", "run_command", "finish_task"])
ARGUMENTS = st.dictionaries(st.sampled_from(["path", "content", "command"]), TEXT).map(json.dumps)


@st.composite
def turns(draw: st.DrawFn, start: int) -> list[dict[str, Any]]:
    kind = draw(st.sampled_from(["calls", "text", "user"]))
    if kind == "text":
        return [assistant_message(draw(st.none() | TEXT), [])]
    if kind == "user":
        return [{"role": "user", "content": draw(TEXT)}]
    count = draw(st.integers(1, 3))
    ids = [f"id{start}_{i}" for i in range(count)]
    calls = [call(i, draw(NAMES), draw(ARGUMENTS)) for i in ids]
    return [assistant_message(draw(st.none() | TEXT), calls)] + [
        tool_message(i, draw(RESULT)) for i in ids
    ]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages = planning_messages(draw(TEXT), "ws")
    for n in range(draw(st.integers(0, 20))):
        messages += draw(turns(n))
    return messages


def kept_tail(messages: list[dict[str, Any]], keep_last: int) -> list[dict[str, Any]]:
    """The tail compaction must keep: the last keep_last messages, widened back to the
    assistant message whose results it starts with."""
    start = max(2, len(messages) - keep_last)
    while 2 < start < len(messages) and messages[start]["role"] == "tool":
        start -= 1
    return messages[start:]


@BOUNDED
@given(messages=conversations(), percent=st.integers(0, 110), keep_last=st.integers(0, 6))
def test_compaction_keeps_what_it_promises(
    messages: list[dict[str, Any]], percent: int, keep_last: int
) -> None:
    budget = estimate_tokens(messages) * percent // 100
    before = copy.deepcopy(messages)
    out = compact(messages, budget_tokens=budget, keep_last=keep_last)
    assert messages == before, "the input is not modified"
    assert out == compact(copy.deepcopy(messages), budget_tokens=budget, keep_last=keep_last)
    assert dangling_tool_calls(out) == ()
    if estimate_tokens(messages) <= budget:
        assert out == messages
        return
    tail = kept_tail(messages, keep_last)
    assert out[:2] == messages[:2]
    assert out[len(out) - len(tail) :] == tail
    middle = out[2 : len(out) - len(tail)]
    assert len(middle) <= 1
    if middle:
        assert middle[0]["role"] == "user"
        assert middle[0]["content"].startswith(SUMMARY_PREFIX)
    if estimate_tokens([*messages[:2], *tail]) + SUMMARY_ALLOWANCE <= budget:
        assert estimate_tokens(out) <= budget


def test_a_call_with_many_arguments_makes_a_bounded_line() -> None:
    arguments = json.dumps({f"key{i}": "v" * 50 for i in range(50)})
    asked = assistant_message("", [call("a", "read_file", arguments)])
    messages = [*head(), asked, tool_message("a", "ok"), assistant_message("done", [])]
    out = compact(messages, budget_tokens=estimate_tokens(messages) - 1, keep_last=1)
    (line,) = out[2]["content"].splitlines()[1:]
    assert line.startswith('- read_file(key0="')
    assert len(line) <= 2 + 6 * 160
