"""The agent plan: its published schema, its validation and the problems a model is sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.agent.plan_schema import (
    MAX_TITLE_CHARS,
    PLAN_SCHEMA,
    AgentPlan,
    AgentStep,
    AgentTask,
    bounded_plan_schema,
    plan_feedback,
    validate_plan,
)
from acode.agent.plan_schema import _schema_problems as schema_problems
from acode.errors import PlanError

BOUNDED = settings(max_examples=200, deadline=None)

VALID: dict[str, Any] = {
    "tasks": [
        {"title": "Read the login code", "steps": [{"title": "Open src/login.py"}]},
        {
            "title": "Add email validation",
            "steps": [{"title": "Write the validator"}, {"title": "Run the tests"}],
        },
    ]
}


def problems_of(answer: object, **limits: int) -> tuple[str, ...]:
    plan, problems = validate_plan(answer, max_tasks=limits.pop("max_tasks", 12), **limits)
    assert plan is None
    return problems


# -- the schema ------------------------------------------------------------------------


def test_the_schema_is_the_published_one() -> None:
    assert PLAN_SCHEMA["$id"] == "https://acode.dev/schemas/agent-plan.v1.json"
    assert PLAN_SCHEMA["required"] == ["tasks"]
    tasks = PLAN_SCHEMA["properties"]["tasks"]
    assert tasks["type"] == "array"
    assert tasks["minItems"] == 1
    assert tasks["items"]["required"] == ["title", "steps"]
    steps = tasks["items"]["properties"]["steps"]
    assert steps["minItems"] == 1
    assert steps["items"]["required"] == ["title"]


def test_the_schema_has_no_max_length_which_breaks_llama_cpp_grammars() -> None:
    assert "maxLength" not in json.dumps(PLAN_SCHEMA)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(PLAN_SCHEMA)
    Draft202012Validator.check_schema(bounded_plan_schema(3, 4))


def test_the_bounded_schema_is_a_copy_with_max_items() -> None:
    published = json.dumps(PLAN_SCHEMA)
    bounded = bounded_plan_schema(3, 4)
    assert bounded["properties"]["tasks"]["maxItems"] == 3
    assert bounded["properties"]["tasks"]["items"]["properties"]["steps"]["maxItems"] == 4
    assert json.dumps(PLAN_SCHEMA) == published
    assert bounded_plan_schema(None, None) == PLAN_SCHEMA


# -- valid plans -----------------------------------------------------------------------


def test_a_valid_plan_gets_ids_by_order() -> None:
    plan, problems = validate_plan(VALID, max_tasks=12)
    assert problems == ()
    assert plan == AgentPlan(
        tasks=(
            AgentTask("t1", "Read the login code", (AgentStep("Open src/login.py"),)),
            AgentTask(
                "t2",
                "Add email validation",
                (AgentStep("Write the validator"), AgentStep("Run the tests")),
            ),
        )
    )


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps(VALID),
        f"```json\n{json.dumps(VALID, indent=2)}\n```",
        f"Here is the plan:\n{json.dumps(VALID)}\nI hope it helps. {{not json}}",
        f"Plan {{draft}} then the real one: {json.dumps(VALID)}",
        json.dumps(VALID).encode(),
    ],
    ids=["json", "fenced", "prose-around", "an-earlier-brace-block", "bytes"],
)
def test_text_answers_are_read_like_the_parsed_one(answer: object) -> None:
    assert validate_plan(answer, max_tasks=12) == validate_plan(VALID, max_tasks=12)


def test_titles_are_stripped_and_unknown_keys_ignored() -> None:
    answer = {
        "reasoning": "irrelevant",
        "tasks": [{"title": "  Do it \n", "steps": [{"title": "\tstep", "why": 1}], "id": 9}],
    }
    plan, _ = validate_plan(answer, max_tasks=1)
    assert plan == AgentPlan((AgentTask("t1", "Do it", (AgentStep("step"),)),))


def test_the_limits_are_inclusive() -> None:
    answer = {"tasks": [{"title": "x" * MAX_TITLE_CHARS, "steps": [{"title": "s"}] * 3}] * 2}
    plan, problems = validate_plan(answer, max_tasks=2, max_steps_per_task=3)
    assert problems == ()
    assert plan is not None


def test_the_dict_round_trip() -> None:
    plan, _ = validate_plan(VALID, max_tasks=12)
    assert plan is not None
    recorded = json.loads(json.dumps(plan.to_dict()))
    assert recorded["tasks"][1]["id"] == "t2"
    assert AgentPlan.from_dict(recorded) == plan


def test_a_broken_recorded_plan_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match=r"recorded agent plan is invalid: tasks: missing"):
        AgentPlan.from_dict({"plan": []})


# -- every problem a model can be sent ---------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("", 'not JSON: the answer was empty; expected {"tasks": [{"title": "...", '),
        ('{"tasks": [1 2]}', "not JSON: Expecting ',' delimiter (line 1, column 14)"),
        ("no plan here", "not JSON: Expecting value (line 1, column 1)"),
        ('{"tasks": [', "not JSON: Expecting value (line 1, column 12)"),
        ("[" * 100_000, "not JSON: nested too deeply"),
        ([], 'expected a JSON object shaped as {"tasks": [{"title": "...", '),
        ('"tasks"', 'expected a JSON object shaped as {"tasks": [{"title": "...", '),
        ({"plan": {}}, 'tasks: missing; expected {"tasks": '),
        ({"tasks": {"title": "x"}}, "tasks: expected a list of tasks, got an object"),
        ({"tasks": "do it"}, 'tasks: expected a list of tasks, got "do it"'),
        ({"tasks": []}, "tasks: expected at least 1 task"),
        ({"tasks": ["Write tests"]}, 'tasks[0]: expected an object with "title" and "steps", '),
        ({"tasks": [{"steps": [{"title": "s"}]}]}, "tasks[0].title: missing; expected a non-"),
        ({"tasks": [{"title": 42, "steps": [{"title": "s"}]}]}, "tasks[0].title: expected a "),
        ({"tasks": [{"title": " ", "steps": [{"title": "s"}]}]}, "tasks[0].title: expected a "),
        ({"tasks": [{"title": "t"}]}, 'tasks[0].steps: missing; expected a list such as [{"ti'),
        ({"tasks": [{"title": "t", "steps": None}]}, "tasks[0].steps: expected a list of steps"),
        ({"tasks": [{"title": "t", "steps": []}]}, "tasks[0].steps: expected at least 1 step"),
        ({"tasks": [{"title": "t", "steps": ["s"]}]}, "tasks[0].steps[0]: expected an object wi"),
        ({"tasks": [{"title": "t", "steps": [{}]}]}, "tasks[0].steps[0].title: missing; expecte"),
        ({"tasks": [{"title": "t", "steps": [{"title": None}]}]}, "tasks[0].steps[0].title: ex"),
    ],
)
def test_each_problem_names_its_path(answer: object, expected: str) -> None:
    problems = problems_of(answer)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_the_full_texts_of_the_value_problems() -> None:
    def task(title: object) -> dict[str, Any]:
        return {"title": title, "steps": [{"title": "s"}]}

    answer = {"tasks": [task("a"), task("b"), task(42), task(True), task([1]), task("x" * 250)]}
    assert problems_of(answer) == (
        "tasks[2].title: expected a non-empty string, got 42",
        "tasks[3].title: expected a non-empty string, got true",
        "tasks[4].title: expected a non-empty string, got a list",
        f"tasks[5].title: 250 characters, at most {MAX_TITLE_CHARS}",
    )


def test_too_many_tasks_and_steps() -> None:
    many = {"tasks": [{"title": "t", "steps": [{"title": "s"}] * 21}] * 31}
    problems = problems_of(many)
    assert problems[0] == "tasks: 31 tasks, at most 12"
    assert problems[1] == "tasks[0].steps: 21 steps, at most 20"
    assert len(problems) == 32
    assert problems_of(many, max_tasks=40, max_steps_per_task=5)[0] == (
        "tasks[0].steps: 21 steps, at most 5"
    )


def test_a_long_wrong_value_is_cut_short() -> None:
    (problem,) = problems_of({"tasks": "x" * 500})
    assert problem == f'tasks: expected a list of tasks, got "{"x" * 36}...'


def test_every_problem_of_an_answer_is_reported_together() -> None:
    answer = {"tasks": [{"title": "", "steps": []}, {"title": "ok", "steps": [{"title": 1}]}]}
    assert problems_of(answer) == (
        'tasks[0].title: expected a non-empty string, got ""',
        "tasks[0].steps: expected at least 1 step",
        "tasks[1].steps[0].title: expected a non-empty string, got 1",
    )


def test_several_problems_at_once_each_with_its_path_in_the_answers_order() -> None:
    answer = {
        "tasks": [
            {},
            {"title": "  ", "steps": "one"},
            {"title": "t", "steps": [{"title": "s"}, {}, "step", {"title": "x" * 201}]},
            {"steps": [{"title": None}, {"title": "\n"}], "title": ["t"]},
            "a task",
        ]
    }
    assert problems_of(answer, max_tasks=4, max_steps_per_task=3) == (
        "tasks: 5 tasks, at most 4",
        "tasks[0].title: missing; expected a non-empty string",
        'tasks[0].steps: missing; expected a list such as [{"title": "..."}]',
        'tasks[1].title: expected a non-empty string, got "  "',
        'tasks[1].steps: expected a list of steps, got "one"',
        "tasks[2].steps: 4 steps, at most 3",
        "tasks[2].steps[1].title: missing; expected a non-empty string",
        'tasks[2].steps[2]: expected an object with "title", got "step"',
        "tasks[2].steps[3].title: 201 characters, at most 200",
        "tasks[3].title: expected a non-empty string, got a list",
        "tasks[3].steps[0].title: expected a non-empty string, got null",
        'tasks[3].steps[1].title: expected a non-empty string, got "\\n"',
        'tasks[4]: expected an object with "title" and "steps", got "a task"',
    )


def test_a_task_missing_both_keys_gets_one_problem_for_each() -> None:
    assert problems_of({"tasks": [{"why": "?"}]}) == (
        "tasks[0].title: missing; expected a non-empty string",
        'tasks[0].steps: missing; expected a list such as [{"title": "..."}]',
    )


def test_a_caller_may_pass_any_mapping_and_tuples() -> None:
    from types import MappingProxyType

    answer = MappingProxyType(
        {"tasks": ({"title": "t", "steps": (MappingProxyType({"title": "s"}),)},)}
    )
    plan, problems = validate_plan(answer, max_tasks=1)
    assert problems == ()
    assert plan == AgentPlan((AgentTask("t1", "t", (AgentStep("s"),)),))


def test_a_rule_without_its_own_wording_is_still_one_line_with_its_path() -> None:
    from jsonschema import Draft202012Validator

    schema = bounded_plan_schema(None, None)
    schema["properties"]["tasks"]["items"]["properties"]["title"]["pattern"] = "^[A-Z]"
    validator = Draft202012Validator(schema)
    answer = {"tasks": [{"title": "lower case " * 30, "steps": [{"title": "s"}]}]}
    ((path, text),) = schema_problems(answer, validator)
    assert path == ("tasks", 0, "title")
    # jsonschema's own message, cut short: "'lower case ... ' does not match '^[A-Z]'".
    assert text == "'" + ("lower case " * 30)[:119] + "..."


def test_the_feedback_lists_the_problems_and_asks_for_a_retry() -> None:
    text = plan_feedback(["tasks: expected at least 1 task", "tasks[0].title: missing"])
    assert text.startswith(
        "Your plan was not valid:\n- tasks: expected at least 1 task\n- tasks[0].title: missing\n"
    )
    assert "Call submit_plan again" in text
    assert '{"tasks": [{"title": "...", "steps": [{"title": "..."}]}]}' in text


def test_the_feedback_stays_short_when_there_are_many_problems() -> None:
    text = plan_feedback([f"tasks[{i}].title: missing" for i in range(40)])
    assert "tasks[11].title" in text
    assert "tasks[12].title" not in text
    assert "- ... and 28 more problems" in text


# -- properties ------------------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["tasks", "title", "steps", "x"]) | st.text(), children)
    ),
    max_leaves=30,
)
TITLE = st.text(min_size=1, max_size=MAX_TITLE_CHARS).filter(lambda t: t == t.strip() != "")
PLAN_DICTS = st.lists(
    st.fixed_dictionaries(
        {
            "title": TITLE,
            "steps": st.lists(st.fixed_dictionaries({"title": TITLE}), min_size=1, max_size=20),
        }
    ),
    min_size=1,
    max_size=12,
).map(lambda tasks: {"tasks": tasks})


@BOUNDED
@given(answer=JSONISH | st.builds(lambda v: {"tasks": v}, JSONISH))
def test_any_parsed_value_gets_a_plan_or_problems_never_an_exception(answer: object) -> None:
    plan, problems = validate_plan(answer, max_tasks=12)
    assert (plan is None) == bool(problems)
    assert all(isinstance(p, str) and "\n" not in p for p in problems)


@BOUNDED
@given(
    text=st.text()
    | JSONISH.map(json.dumps)
    | st.tuples(st.text(max_size=10), JSONISH.map(json.dumps), st.text(max_size=10)).map("".join)
)
def test_any_text_gets_a_plan_or_problems_never_an_exception(text: str) -> None:
    plan, problems = validate_plan(text, max_tasks=12)
    assert (plan is None) == bool(problems)


@BOUNDED
@given(data=PLAN_DICTS, wrap=st.sampled_from(["{}", "```json\n{}\n```", "Plan: {} (done)"]))
def test_every_valid_plan_is_accepted_and_round_trips(data: dict[str, Any], wrap: str) -> None:
    plan, problems = validate_plan(wrap.format(json.dumps(data)), max_tasks=12)
    assert problems == ()
    assert plan is not None
    assert [task.id for task in plan.tasks] == [f"t{i + 1}" for i in range(len(data["tasks"]))]
    recorded = plan.to_dict()
    assert [{"title": t["title"], "steps": t["steps"]} for t in recorded["tasks"]] == data["tasks"]
    assert AgentPlan.from_dict(json.loads(json.dumps(recorded))) == plan
