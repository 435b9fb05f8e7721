"""The tool definitions, the checking of the model's tool calls, and workspace paths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.agent.plan_schema import PLAN_SCHEMA
from acode.agent.tools import (
    PLAN_TOOL,
    PLAN_TOOL_CHOICE,
    TASK_TOOL_CHOICE,
    TASK_TOOL_NAMES,
    TASK_TOOLS,
    BadToolCall,
    ToolCall,
    parse_tool_calls,
    plan_tool,
    relative_path,
)

BOUNDED = settings(max_examples=200, deadline=None)
TOOLS = "the tools are read_file(path), write_file(path, content), edit_file(path, old, new), "
TOOLS += "run_command(command), finish_task(summary)"


def call(name: str, arguments: object, call_id: str | None = "c1") -> dict[str, Any]:
    raw: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        raw["id"] = call_id
    return raw


def one(raw: object) -> ToolCall | BadToolCall:
    (parsed,) = parse_tool_calls([raw])  # type: ignore[list-item]
    return parsed


# -- definitions -----------------------------------------------------------------------


def test_the_five_task_tools_take_required_strings() -> None:
    expected = {
        "read_file": ["path"],
        "write_file": ["path", "content"],
        "edit_file": ["path", "old", "new"],
        "run_command": ["command"],
        "finish_task": ["summary"],
    }
    assert tuple(expected) == TASK_TOOL_NAMES
    for tool in TASK_TOOLS:
        assert tool["type"] == "function"
        function = tool["function"]
        assert function["description"]
        parameters = function["parameters"]
        assert parameters["type"] == "object"
        assert parameters["required"] == expected[function["name"]]
        assert list(parameters["properties"]) == expected[function["name"]]
        assert all(p["type"] == "string" for p in parameters["properties"].values())
    assert "maxLength" not in json.dumps(TASK_TOOLS)


def test_the_plan_tool_is_forced_and_takes_the_plan_schema() -> None:
    function = PLAN_TOOL["function"]
    assert PLAN_TOOL["type"] == "function"
    assert function["name"] == "submit_plan"
    parameters = function["parameters"]
    assert "$schema" not in parameters
    assert "$id" not in parameters
    assert parameters["properties"] == PLAN_SCHEMA["properties"]
    assert parameters["properties"] is not PLAN_SCHEMA["properties"]
    assert parameters["required"] == ["tasks"]
    assert PLAN_TOOL_CHOICE == {"type": "function", "function": {"name": "submit_plan"}}
    assert TASK_TOOL_CHOICE == "auto"


def test_the_definitions_are_json() -> None:
    encoded = json.dumps({"tools": [*TASK_TOOLS, PLAN_TOOL], "tool_choice": PLAN_TOOL_CHOICE})
    assert json.loads(encoded)["tools"][5]["function"]["name"] == "submit_plan"


# -- parsing calls ---------------------------------------------------------------------


def test_a_good_call_keeps_its_id_and_only_its_own_arguments() -> None:
    parsed = one(call("write_file", '{"path": "a.py", "content": "x = 1\\n", "mode": "w"}'))
    assert parsed == ToolCall("c1", "write_file", {"path": "a.py", "content": "x = 1\n"})


def test_arguments_already_parsed_are_accepted() -> None:
    parsed = one(call("edit_file", {"path": "a", "old": "1", "new": "2"}))
    assert parsed == ToolCall("c1", "edit_file", {"path": "a", "old": "1", "new": "2"})


def test_calls_without_ids_get_their_position() -> None:
    parsed = parse_tool_calls(
        [
            call("read_file", '{"path": "a"}', call_id=None),
            call("read_file", '{"path": "b"}', call_id=""),
            call("read_file", '{"path": "c"}', call_id="given"),
        ]
    )
    assert [p.id for p in parsed] == ["call_0", "call_1", "given"]
    assert parse_tool_calls([]) == ()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (call("foo", "{}"), f"unknown tool 'foo'; {TOOLS}"),
        (call("f" * 100, "{}"), f"unknown tool '{'f' * 37}...'; {TOOLS}"),
        (call("submit_plan", "{}"), f"unknown tool 'submit_plan'; {TOOLS}"),
        (call(None, "{}"), f"the tool call names no tool; {TOOLS}"),  # type: ignore[arg-type]
        ({"id": "c1", "type": "function"}, f"tool call has no function; {TOOLS}"),
        (
            call("write_file", '{"path": "a"}'),
            "write_file: missing argument 'content'; call it as write_file(path, content)",
        ),
        (
            call("edit_file", '{"path": "a"}'),
            "edit_file: missing arguments 'old' and 'new'; call it as edit_file(path, old, new)",
        ),
        (call("read_file", None), "read_file: missing argument 'path'; call it as read_file(path)"),
        (call("read_file", " "), "read_file: missing argument 'path'; call it as read_file(path)"),
        (
            call("read_file", '{"path": '),
            "read_file: the arguments are not valid JSON (Expecting value: line 1 column 10 "
            "(char 9)); call it as read_file(path)",
        ),
        (
            call("read_file", '["a"]'),
            "read_file: the arguments must be a JSON object; call it as read_file(path)",
        ),
        (
            call("read_file", 7),
            "read_file: the arguments must be a JSON object; call it as read_file(path)",
        ),
        (call("read_file", '{"path": 1}'), "read_file: argument 'path' must be a string, got 1"),
        (
            call("run_command", {"command": ["ls", "-l"]}),
            "run_command: argument 'command' must be a string, got a list",
        ),
        (
            call("finish_task", {"summary": None}),
            "finish_task: argument 'summary' must be a string, got null",
        ),
    ],
)
def test_each_bad_call_says_how_to_correct_it(raw: object, error: str) -> None:
    parsed = one(raw)
    assert isinstance(parsed, BadToolCall)
    assert parsed.id == "c1"
    assert parsed.error == error


def test_an_item_that_is_not_an_object_is_a_bad_call() -> None:
    assert one("read_file") == BadToolCall("call_0", "", "tool call 0 is not an object")
    assert one({"function": {"name": "x"}}).id == "call_0"


def test_bad_and_good_calls_keep_their_order() -> None:
    parsed = parse_tool_calls([call("foo", "{}", "a"), call("read_file", '{"path": "x"}', "b")])
    assert [type(p) for p in parsed] == [BadToolCall, ToolCall]
    assert parsed[0].name == "foo"


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["path", "content", "old", "new", "x"]), children)
    ),
    max_leaves=12,
)
ARGUMENTS = JSONISH | JSONISH.map(json.dumps) | st.text(max_size=30)
RAW_CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": JSONISH,
        "type": JSONISH,
        "function": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from([*TASK_TOOL_NAMES, "submit_plan", ""]) | JSONISH,
                "arguments": ARGUMENTS,
            },
        )
        | JSONISH,
    },
)


@BOUNDED
@given(raw=st.lists(RAW_CALL | JSONISH, max_size=4))
def test_parsing_never_raises_and_answers_every_call(raw: list[Any]) -> None:
    parsed = parse_tool_calls(raw)
    assert len(parsed) == len(raw)
    for index, item in enumerate(parsed):
        assert item.id
        if isinstance(item, ToolCall):
            assert item.name in TASK_TOOL_NAMES
            assert all(isinstance(v, str) for v in item.arguments.values())
            assert raw[index]["function"]["name"] == item.name
        else:
            assert item.error


# -- paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.py", "a.py"),
        ("src/../a.py", "a.py"),
        ("./a", "a"),
        ("a/./b//c", "a/b/c"),
        ("a/b/", "a/b"),
        ("a/b/../../c", "c"),
        ("..a/b..", "..a/b.."),
        ("~/x", "~/x"),
        ("../x", None),
        ("a/../../x", None),
        ("/etc/passwd", None),
        ("//etc", None),
        ("", None),
        (".", None),
        ("a/..", None),
        ("a\0b", None),
        ("evil\u202etxt.py", None),
        ("a\x1b[2Jb", None),
        ("n" * 256, None),
        ("n" * 255, "n" * 255),
    ],
)
def test_relative_path(path: str, expected: str | None) -> None:
    assert relative_path(path) == expected


@BOUNDED
@given(
    path=st.lists(st.sampled_from(["a", "b.py", ".", "..", "", "/", "\0", "x/"])).map("/".join)
    | st.text()
)
def test_a_relative_path_never_escapes(path: str) -> None:
    result = relative_path(path)
    if result is not None:
        assert not result.startswith("/")
        assert ".." not in result.split("/")
        assert "." not in result.split("/")
        assert "" not in result.split("/")
        assert "\0" not in result
        assert relative_path(result) == result


def test_the_plan_tool_sent_is_bounded_by_the_settings() -> None:
    tasks = plan_tool(3, 4)["function"]["parameters"]["properties"]["tasks"]
    assert tasks["maxItems"] == 3
    assert tasks["items"]["properties"]["steps"]["maxItems"] == 4
    assert "maxItems" not in json.dumps(PLAN_TOOL)  # the published schema stays unbounded
