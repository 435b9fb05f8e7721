"""Continuation planning: from a plan and the recorded step statuses, what resume skips,
what it finds half-done (and what it will do with it), and what is still to run."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.continuation import (
    ContinuationPlan,
    PlanMismatch,
    check_positions,
    expected_action,
    plan_continuation,
    replay_ranges,
)
from acode.domain.kinds import StepKind
from acode.domain.plan import Plan, StepSpec
from acode.domain.reducer import StepStatus

DONE = StepStatus.COMPLETED
RUNNING = StepStatus.IN_PROGRESS

PLAN = Plan.from_dict(
    {
        "title": "Add input validation",
        "tasks": [
            {
                "id": "analyze",
                "title": "Analyze existing code",
                "steps": [
                    {"id": "read-login", "read": "src/login.py"},
                    {"id": "tests", "run": "python -m pytest -q", "idempotent": True},
                ],
            },
            {
                "id": "implement",
                "title": "Add email validator",
                "steps": [
                    {"id": "validator", "write": "src/validators.py", "content": "x = 1\n"},
                    {"id": "use-it", "edit": "src/login.py", "old": "a", "new": "b"},
                    {"id": "log", "run": "echo done >> build.log", "paths": ["build.log"]},
                    {"id": "ok", "approve": "Apply these changes?"},
                    {"id": "summary", "model": "Summarize the change in one line."},
                    {"id": "custom", "python": "mypkg.tasks:check"},
                    {"id": "save", "commit": "Add email validation"},
                ],
            },
        ],
    }
)
ALL_STEPS = tuple(step.id for step in PLAN.steps())


def continue_(statuses: Mapping[str, StepStatus]) -> ContinuationPlan:
    return plan_continuation(PLAN, statuses)


def test_nothing_recorded_resumes_at_the_first_step() -> None:
    plan = continue_({})
    assert plan == ContinuationPlan(
        skipped_tasks=(),
        skipped_steps=(),
        in_progress=None,
        in_progress_action=None,
        pending_steps=ALL_STEPS,
        resume_task="analyze",
        resume_task_number=1,
        resume_step_number=1,
    )


def test_a_finished_task_is_skipped_and_resume_starts_the_next() -> None:
    plan = continue_({"read-login": DONE, "tests": DONE})
    assert plan.skipped_tasks == ("analyze",)
    assert plan.skipped_steps == ("read-login", "tests")
    assert plan.pending_steps == ALL_STEPS[2:]
    assert (plan.resume_task, plan.resume_task_number, plan.resume_step_number) == (
        "implement",
        2,
        1,
    )


def test_an_interrupted_step_is_in_progress_with_the_action_of_its_kind() -> None:
    done = dict.fromkeys(ALL_STEPS[:3], DONE)
    plan = continue_({**done, "use-it": RUNNING})
    assert plan.skipped_tasks == ("analyze",)
    assert plan.skipped_steps == ALL_STEPS[:3]
    assert plan.in_progress == "use-it"
    assert plan.in_progress_action == "compare with pre/post image"
    assert plan.pending_steps == ALL_STEPS[4:]
    assert (plan.resume_task, plan.resume_task_number, plan.resume_step_number) == (
        "implement",
        2,
        2,
    )


def test_a_rolled_back_step_is_still_in_progress() -> None:
    plan = continue_({"read-login": DONE, "tests": StepStatus.ROLLED_BACK})
    assert plan.in_progress == "tests"
    assert plan.in_progress_action == "retry"
    assert plan.skipped_tasks == ()
    assert (plan.resume_task_number, plan.resume_step_number) == (1, 2)


@pytest.mark.parametrize("status", [StepStatus.FAILED, StepStatus.PENDING, StepStatus.SKIPPED])
def test_a_step_not_started_or_failed_is_pending(status: StepStatus) -> None:
    plan = continue_({"read-login": DONE, "tests": status})
    assert plan.in_progress is None
    assert plan.in_progress_action is None
    assert plan.pending_steps == ALL_STEPS[1:]
    assert (plan.resume_task_number, plan.resume_step_number) == (1, 2)


def test_a_finished_session_has_nothing_to_continue() -> None:
    plan = continue_(dict.fromkeys(ALL_STEPS, DONE))
    assert plan == ContinuationPlan(
        skipped_tasks=("analyze", "implement"),
        skipped_steps=ALL_STEPS,
        in_progress=None,
        in_progress_action=None,
        pending_steps=(),
        resume_task=None,
        resume_task_number=None,
        resume_step_number=None,
    )


def test_only_the_first_interrupted_step_is_in_progress() -> None:
    plan = continue_({"validator": RUNNING, "log": RUNNING})
    assert plan.in_progress == "validator"
    assert "log" in plan.pending_steps
    assert "validator" not in plan.pending_steps


def test_a_completed_step_after_an_unfinished_one_is_still_skipped() -> None:
    plan = continue_({"tests": DONE})
    assert plan.skipped_steps == ("tests",)
    assert plan.skipped_tasks == ()
    assert plan.pending_steps == tuple(s for s in ALL_STEPS if s != "tests")
    assert (plan.resume_task_number, plan.resume_step_number) == (1, 1)


def test_statuses_of_steps_not_in_the_plan_are_ignored() -> None:
    assert continue_({"elsewhere": DONE, "gone": RUNNING}) == continue_({})


def test_to_dict_lists_what_resume_will_do() -> None:
    plan = continue_({"read-login": DONE, "tests": DONE, "validator": RUNNING})
    assert plan.to_dict() == {
        "skipped_tasks": ["analyze"],
        "skipped_steps": ["read-login", "tests"],
        "in_progress": "validator",
        "in_progress_action": "compare with pre/post image",
        "pending_steps": list(ALL_STEPS[3:]),
        "resume_task": "implement",
    }


# -- the expected action by kind ---------------------------------------------------------


def step(kind: StepKind, **extra: Any) -> StepSpec:
    return StepSpec(id="s", kind=kind, task_id="t", target="x", **extra)


@pytest.mark.parametrize(
    ("spec", "action"),
    [
        (step(StepKind.READ), "retry"),
        (step(StepKind.WRITE, content=""), "compare with pre/post image"),
        (step(StepKind.EDIT, old="a", new="b"), "compare with pre/post image"),
        (step(StepKind.RUN), "retry"),
        (step(StepKind.RUN, idempotent=True), "retry"),
        (step(StepKind.RUN, idempotent=True, paths=("out",), check="test -f out"), "retry"),
        (step(StepKind.RUN, check="test -f out"), "check, else rollback_retry"),
        (step(StepKind.RUN, check="test -f out", paths=("out",)), "check, else rollback_retry"),
        (step(StepKind.RUN, paths=("build.log",)), "rollback_retry"),
        (step(StepKind.MODEL), "retry"),
        (step(StepKind.APPROVE), "ask again unless decided"),
        (step(StepKind.COMMIT), "find commit by trailer, else commit"),
        (step(StepKind.PYTHON), "retry"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_the_expected_action_follows_the_kind(spec: StepSpec, action: str) -> None:
    assert expected_action(spec) == action


@pytest.mark.parametrize(
    ("step_id", "action"),
    [
        ("read-login", "retry"),
        ("tests", "retry"),
        ("validator", "compare with pre/post image"),
        ("use-it", "compare with pre/post image"),
        ("log", "rollback_retry"),
        ("ok", "ask again unless decided"),
        ("summary", "retry"),
        ("custom", "retry"),
        ("save", "find commit by trailer, else commit"),
    ],
)
def test_the_plan_reports_the_action_for_the_interrupted_step(step_id: str, action: str) -> None:
    before = ALL_STEPS[: ALL_STEPS.index(step_id)]
    plan = continue_({**dict.fromkeys(before, DONE), step_id: RUNNING})
    assert plan.in_progress == step_id
    assert plan.in_progress_action == action


# -- any plan, any statuses --------------------------------------------------------------


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    tasks = []
    for t in range(draw(st.integers(1, 4))):
        steps = [
            {"id": f"s{t}-{s}", draw(st.sampled_from(["read", "model", "commit"])): "x"}
            for s in range(draw(st.integers(1, 4)))
        ]
        tasks.append({"id": f"t{t}", "title": f"task {t}", "steps": steps})
    return Plan.from_dict({"title": "generated", "tasks": tasks})


@settings(max_examples=100, deadline=None)
@given(st.data(), plans())
def test_every_step_is_skipped_in_progress_or_pending_in_plan_order(
    data: st.DataObject, plan: Plan
) -> None:
    ids = [s.id for s in plan.steps()]
    statuses = data.draw(st.dictionaries(st.sampled_from(ids), st.sampled_from(StepStatus)))
    result = plan_continuation(plan, statuses)

    unfinished = [i for i in ids if statuses.get(i) is not DONE]
    interrupted = [i for i in unfinished if statuses.get(i) in (RUNNING, StepStatus.ROLLED_BACK)]
    assert result.skipped_steps == tuple(i for i in ids if i not in unfinished)
    assert result.in_progress == (interrupted[0] if interrupted else None)
    assert result.pending_steps == tuple(i for i in unfinished if i != result.in_progress)
    assert result.skipped_tasks == tuple(
        t.id for t in plan.tasks if all(statuses.get(s.id) is DONE for s in t.steps)
    )
    if not unfinished:
        assert result.resume_task is None
        return
    task_number = result.resume_task_number
    step_number = result.resume_step_number
    assert task_number is not None
    assert step_number is not None
    task = plan.tasks[task_number - 1]
    assert task.id == result.resume_task
    assert task.steps[step_number - 1].id == unfinished[0]


@given(
    st.integers(min_value=0, max_value=200),
    st.sets(st.integers(min_value=0, max_value=220), max_size=12),
)
def test_replay_ranges_are_every_completed_position_in_order(
    next_position: int, unfinished: set[int]
) -> None:
    ranges = replay_ranges(next_position, unfinished)
    positions = [p for first, last in ranges for p in range(first, last + 1)]
    assert positions == [p for p in range(next_position) if p not in unfinished]
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(ranges))
    assert len(ranges) <= len(unfinished) + 1


def test_check_positions_accepts_the_record_of_the_plan_and_refuses_another() -> None:
    check_positions(PLAN, 3, {2: "validator"})
    with pytest.raises(PlanMismatch, match="step 3 was recorded as 'other', but its plan has"):
        check_positions(PLAN, 3, {2: "other"})
    too_many = len(PLAN.steps()) + 1
    with pytest.raises(PlanMismatch, match=f"{too_many} steps were recorded, but its plan has"):
        check_positions(PLAN, too_many, {})
