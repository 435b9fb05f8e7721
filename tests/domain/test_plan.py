"""The plan model: building from plain data, line numbers, the dict round trip, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.durations import MAX_TIMEOUT_SECONDS, TIMEOUT_RULE
from acode.domain.kinds import StepKind
from acode.domain.plan import Plan, StepSpec, TaskSpec, _default_title
from acode.domain.plan_validation import NodePath, PlanProblem, build_plan, plan_error
from acode.errors import ErrorCode, PlanError

# The first example of docs/plans.md as a YAML parser hands it over.
EXAMPLE: dict[str, Any] = {
    "title": "Add input validation",
    "tasks": [
        {
            "id": "analyze",
            "title": "Analyze existing code",
            "steps": [
                {"id": "read-login", "read": "src/login.py"},
                {"id": "tests", "run": "python -m pytest -q", "idempotent": True, "timeout": 120},
            ],
        },
        {
            "id": "implement",
            "title": "Add email validator",
            "steps": [
                {
                    "id": "validator",
                    "write": "src/validators.py",
                    "content": 'def is_email(s: str) -> bool:\n    return "@" in s\n',
                },
                {
                    "id": "use-it",
                    "edit": "src/login.py",
                    "old": "def login(user):",
                    "new": "def login(user: str):",
                },
                {"id": "log", "run": "echo done >> build.log", "paths": ["build.log"]},
                {"id": "ok", "approve": "Apply these changes?"},
                {"id": "summary", "model": "Summarize the change in one line."},
                {"id": "custom", "python": "mypkg.tasks:check"},
                {"id": "save", "commit": "Add email validation"},
            ],
        },
    ],
}


def no_lines(path: NodePath) -> int | None:
    return None


def build(data: object, lines: dict[NodePath, int] | None = None) -> Plan:
    table = lines or {}
    return build_plan(data, source="plan.yml", line_of=table.get)


def refusal(data: object, lines: dict[NodePath, int] | None = None) -> str:
    with pytest.raises(PlanError) as info:
        build(data, lines)
    assert info.value.code is ErrorCode.PLAN_INVALID
    assert info.value.exit_code == 2
    return info.value.message


def test_builds_the_design_example() -> None:
    plan = build(EXAMPLE)

    assert plan.title == "Add input validation"
    assert [task.id for task in plan.tasks] == ["analyze", "implement"]
    assert [(s.task_id, s.id, s.kind) for s in plan.steps()] == [
        ("analyze", "read-login", StepKind.READ),
        ("analyze", "tests", StepKind.RUN),
        ("implement", "validator", StepKind.WRITE),
        ("implement", "use-it", StepKind.EDIT),
        ("implement", "log", StepKind.RUN),
        ("implement", "ok", StepKind.APPROVE),
        ("implement", "summary", StepKind.MODEL),
        ("implement", "custom", StepKind.PYTHON),
        ("implement", "save", StepKind.COMMIT),
    ]
    tests = plan.steps()[1]
    assert (tests.target, tests.idempotent, tests.timeout) == ("python -m pytest -q", True, 120.0)
    assert tests.title == "run: python -m pytest -q"
    edit = plan.steps()[3]
    assert (edit.target, edit.old, edit.new) == (
        "src/login.py",
        "def login(user):",
        "def login(user: str):",
    )
    assert plan.steps()[4].paths == ("build.log",)
    assert plan.steps()[2].content == 'def is_email(s: str) -> bool:\n    return "@" in s\n'


def test_to_dict_is_the_plan_file_shape_and_json_able() -> None:
    plan = build(EXAMPLE)
    data = plan.to_dict()

    assert json.loads(json.dumps(data)) == data
    # The recorded dict reads like the file: defaults are left out, the timeout is a float.
    expected = json.loads(json.dumps(EXAMPLE))
    expected["tasks"][0]["steps"][1]["timeout"] = 120.0
    assert data == expected


def test_round_trip_through_the_dict() -> None:
    plan = build(EXAMPLE)
    assert Plan.from_dict(plan.to_dict()) == plan


def test_lines_come_from_line_of_and_do_not_count_for_equality() -> None:
    lines: dict[NodePath, int] = {
        ("tasks", 0): 3,
        ("tasks", 0, "steps", 0): 6,
        ("tasks", 0, "steps", 1): 7,
        ("tasks", 1): 8,
        ("tasks", 1, "steps", 0): 11,
    }
    plan = build(EXAMPLE, lines)

    assert [task.line for task in plan.tasks] == [3, 8]
    assert [step.line for step in plan.steps()[:3]] == [6, 7, 11]
    assert plan.steps()[3].line == 8  # not in the table: the line of its task
    assert Plan.from_dict(plan.to_dict()) == plan
    assert all(step.line is None for step in Plan.from_dict(plan.to_dict()).steps())


def test_a_problem_without_its_own_line_is_reported_at_its_nearest_known_ancestor() -> None:
    data = {"title": "T", "tasks": [{"id": "t", "title": "T", "steps": [{"id": "s", "run": ""}]}]}
    message = refusal(data, {(): 1, ("tasks", 0, "steps", 0): 6})
    assert message == "plan.yml:6: step 's' has an empty command"


def test_problems_without_any_line_name_only_the_source() -> None:
    assert refusal({"tasks": []}) == (
        "plan.yml: 2 problems in the plan\n"
        "plan.yml: the plan has no 'title'\n"
        "plan.yml: 'tasks' of the plan is empty; give it at least one task"
    )


def test_every_problem_is_reported_at_once_in_line_order() -> None:
    data = {
        "title": "T",
        "tasks": [
            {"id": "t", "title": "T", "steps": [{"id": "a", "run": "ls", "timeout": -1}]},
            {"id": "t", "steps": [{"id": "a", "write": "f"}]},
        ],
    }
    lines: dict[NodePath, int] = {
        ("tasks", 1): 9,
        ("tasks", 1, "steps", 0): 12,
        ("tasks", 0, "steps", 0, "timeout"): 6,
    }
    assert refusal(data, lines).splitlines() == [
        "plan.yml: 5 problems in the plan",
        f"plan.yml:6: 'timeout' of step 'a' must be {TIMEOUT_RULE}, got the number -1",
        "plan.yml:9: duplicate task id 't'; it is already used by an earlier task",
        "plan.yml:9: task 't' has no 'title'",
        "plan.yml:12: duplicate step id 'a'; it is already used by an earlier step",
        "plan.yml:12: write step 'a' has no 'content'",
    ]


def test_the_error_says_what_to_do_next() -> None:
    with pytest.raises(PlanError) as info:
        build({"title": "T"})
    assert info.value.hint is not None
    assert "docs/plans.md" in info.value.hint


# Every character str.splitlines breaks at, among others.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(
    st.sampled_from(list(StepKind)),
    st.text(alphabet=st.characters() | st.sampled_from(_LINE_BREAKS)),
)
def test_default_title_is_the_first_line_of_the_target(kind: StepKind, target: str) -> None:
    lines = target.strip().splitlines()
    expected = f"{kind.value}: {lines[0] if lines else ''}"
    if len(expected) > 60:
        expected = expected[:57] + "..."
    assert _default_title(kind, target) == expected


def test_plan_error_renders_problems_as_file_line_message() -> None:
    error = plan_error("p.yml", [PlanProblem(4, "late"), PlanProblem(2, "early")])
    assert error.message == "p.yml: 2 problems in the plan\np.yml:2: early\np.yml:4: late"


def test_default_title_is_derived_and_shortened() -> None:
    step = StepSpec(
        id="s", kind=StepKind.MODEL, task_id="t", target="Explain\nin detail " + "x" * 80
    )
    assert step.title == "model: Explain"
    long = StepSpec(id="s", kind=StepKind.RUN, task_id="t", target="echo " + "y" * 100)
    assert len(long.title) == 60
    assert long.title.endswith("...")
    assert "title" not in long.to_dict()


def test_an_explicit_title_is_kept_and_recorded() -> None:
    step = StepSpec(id="s", kind=StepKind.RUN, task_id="t", target="make", title="Build it")
    assert step.to_dict() == {"id": "s", "title": "Build it", "run": "make"}
    assert StepSpec.from_dict(step.to_dict(), "t") == step


def test_step_from_dict_checks_like_a_plan_file() -> None:
    with pytest.raises(PlanError) as info:
        StepSpec.from_dict({"id": "s", "run": "ls", "content": "x"}, "t")
    assert info.value.message == (
        "recorded step: 'content' does not belong in run step 's' "
        "(a run step takes: id, title, run, idempotent, timeout, paths, check)"
    )


def test_plan_from_dict_refuses_a_damaged_record() -> None:
    data = build(EXAMPLE).to_dict()
    data["tasks"] = []
    with pytest.raises(PlanError, match=r"^recorded plan: 'tasks' of the plan is empty"):
        Plan.from_dict(data)


def test_step_kind_values_are_the_kind_keys() -> None:
    assert {kind.value for kind in StepKind} == {
        "read",
        "write",
        "edit",
        "run",
        "approve",
        "model",
        "python",
        "commit",
    }
    assert StepKind("run") is StepKind.RUN


def test_task_equality_ignores_the_line() -> None:
    step = StepSpec(id="s", kind=StepKind.READ, task_id="t", target="a.txt", line=3)
    assert TaskSpec("t", "T", (step,), line=1) == TaskSpec("t", "T", (step,), line=99)


# --- the round trip for generated plans ----------------------------------------------------

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
IDS = st.builds(str.__add__, st.sampled_from(ALNUM), st.text(ALNUM + "_.-", max_size=63))
TEXT = st.text(min_size=1).filter(str.strip)
# A command or commit message goes to a process as an argument: never with a NUL.
ARGUMENT = TEXT.filter(lambda text: "\0" not in text)
PATHS = st.lists(NAME, min_size=1, max_size=4).map("/".join)
PYTHON_TARGETS = st.builds(
    "{}:{}".format, st.lists(NAME, min_size=1, max_size=3).map(".".join), NAME
)
TIMEOUTS = st.none() | st.floats(
    min_value=0,
    exclude_min=True,
    max_value=MAX_TIMEOUT_SECONDS,
    allow_nan=False,
    allow_infinity=False,
)


@st.composite
def steps(draw: st.DrawFn, step_id: str, task_id: str) -> StepSpec:
    kind = draw(st.sampled_from(StepKind))
    title = draw(st.just("") | TEXT)
    common: dict[str, Any] = {"id": step_id, "kind": kind, "task_id": task_id, "title": title}
    if kind in (StepKind.READ, StepKind.WRITE, StepKind.EDIT):
        common["target"] = draw(PATHS)
    elif kind is StepKind.PYTHON:
        common["target"] = draw(PYTHON_TARGETS)
    elif kind in (StepKind.RUN, StepKind.COMMIT):
        common["target"] = draw(ARGUMENT)
    else:
        common["target"] = draw(TEXT)
    if kind is StepKind.WRITE:
        return StepSpec(**common, content=draw(st.text()))
    if kind is StepKind.EDIT:
        old = draw(st.text(min_size=1))
        new = draw(st.text().filter(lambda s: s != old))
        return StepSpec(**common, old=old, new=new)
    if kind is StepKind.RUN:
        return StepSpec(
            **common,
            idempotent=draw(st.booleans()),
            timeout=draw(TIMEOUTS),
            paths=tuple(draw(st.lists(PATHS, max_size=3))),
            check=draw(st.none() | ARGUMENT),
        )
    return StepSpec(**common)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    task_ids = draw(st.lists(IDS, min_size=1, max_size=3, unique=True))
    step_ids = iter(draw(st.lists(IDS, min_size=len(task_ids) * 3, max_size=12, unique=True)))
    tasks = []
    for task_id in task_ids:
        count = draw(st.integers(min_value=1, max_value=3))
        task_steps = tuple(draw(steps(next(step_ids), task_id)) for _ in range(count))
        tasks.append(TaskSpec(id=task_id, title=draw(TEXT), steps=task_steps))
    return Plan(title=draw(TEXT), tasks=tuple(tasks))


# Few examples keep the suite fast; each run draws new ones, and 3,000 passed when written.
@settings(max_examples=40)
@given(plans())
def test_generated_plans_survive_the_dict_round_trip(plan: Plan) -> None:
    data = json.loads(json.dumps(plan.to_dict()))
    assert Plan.from_dict(data) == plan
    # A recorded plan is rebuilt without the checks, to the same plan.
    assert Plan.from_record(data) == plan


def test_a_recorded_step_is_the_step_the_plan_file_makes() -> None:
    data = {
        "id": "tests",
        "run": "  python -m pytest -q\nsecond line",
        "idempotent": True,
        "timeout": 120,
        "paths": ["build.log"],
        "check": "test -f build.log",
    }
    [task] = Plan.from_record(
        {"title": "p", "tasks": [{"id": "t", "title": "T", "steps": [data]}]}
    ).tasks
    [recorded] = task.steps
    assert recorded == StepSpec.from_dict(data, "t")
    assert recorded.title == "run: python -m pytest -q"  # derived as __init__ derives it
    assert recorded.line is None
    with pytest.raises(AttributeError):  # as frozen as any other StepSpec
        recorded.title = "changed"  # type: ignore[misc]
    assert hash(recorded) == hash(StepSpec.from_dict(data, "t"))


def test_a_recorded_plan_comes_back_without_loading_the_checks() -> None:
    """The plan's values and its validator are two modules: rebuilding a plan acode
    recorded (resume, status, the session list) needs only the first."""
    import subprocess
    import sys

    code = (
        "import sys; from acode.domain.plan import Plan; "
        "Plan.from_record({'title': 'p', 'tasks': [{'id': 't', 'title': 'T', "
        "'steps': [{'id': 's', 'read': 'a.txt'}]}]}); "
        "print('acode.domain.plan_validation' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"
