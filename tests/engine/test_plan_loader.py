"""Loading plan files: real files, real YAML, every refusal with its file, line and wording."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from acode.domain.durations import TIMEOUT_RULE
from acode.domain.kinds import StepKind
from acode.domain.plan import Plan
from acode.engine.plan_loader import load_plan
from acode.errors import ErrorCode, PlanError

# The first example of docs/plans.md, verbatim.
DESIGN_EXAMPLE = """\
title: Add input validation
tasks:
  - id: analyze
    title: Analyze existing code
    steps:
      - {id: read-login, read: src/login.py}
      - {id: tests, run: python -m pytest -q, idempotent: true, timeout: 120}
  - id: implement
    title: Add email validator
    steps:
      - id: validator
        write: src/validators.py
        content: |
          def is_email(s: str) -> bool:
              return "@" in s
      - {id: use-it, edit: src/login.py, old: "def login(user):", new: "def login(user: str):"}
      - {id: log, run: echo done >> build.log, paths: [build.log]}
      - {id: ok, approve: Apply these changes?}
      - {id: summary, model: Summarize the change in one line.}
      - {id: custom, python: "mypkg.tasks:check"}
      - {id: save, commit: Add email validation}
"""

# One task whose steps start on line 6.
HEAD = "title: T\ntasks:\n  - id: main\n    title: Main\n    steps:\n"
RUN_KEYS = "(a run step takes: id, title, run, idempotent, timeout, paths, check)"


def steps(*lines: str) -> str:
    return HEAD + "".join(f"      {line}\n" for line in lines)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yml"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(path: Path) -> str:
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.code is ErrorCode.PLAN_INVALID
    return info.value.message


def test_loads_the_design_example(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, DESIGN_EXAMPLE))

    assert plan.title == "Add input validation"
    assert [(task.id, task.line) for task in plan.tasks] == [("analyze", 3), ("implement", 8)]
    assert [(s.id, s.kind, s.line) for s in plan.steps()] == [
        ("read-login", StepKind.READ, 6),
        ("tests", StepKind.RUN, 7),
        ("validator", StepKind.WRITE, 11),
        ("use-it", StepKind.EDIT, 16),
        ("log", StepKind.RUN, 17),
        ("ok", StepKind.APPROVE, 18),
        ("summary", StepKind.MODEL, 19),
        ("custom", StepKind.PYTHON, 20),
        ("save", StepKind.COMMIT, 21),
    ]
    validator, use_it, log, ok = plan.steps()[2:6]
    assert validator.content == 'def is_email(s: str) -> bool:\n    return "@" in s\n'
    assert (use_it.old, use_it.new) == ("def login(user):", "def login(user: str):")
    assert (log.target, log.paths) == ("echo done >> build.log", ("build.log",))
    assert ok.target == "Apply these changes?"
    assert plan.steps()[1].timeout == 120.0
    assert Plan.from_dict(plan.to_dict()) == plan


def test_every_yaml_plan_in_the_docs_loads(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "plans.md"
    blocks = re.findall(r"```yaml\n(.*?)```", docs.read_text(encoding="utf-8"), re.DOTALL)
    plans = [block for block in blocks if block.startswith("title:")]
    assert plans
    for block in plans:
        load_plan(write(tmp_path, block))


REFUSALS = [
    pytest.param(
        "- read: a.txt\n",
        1,
        "the plan must be a mapping with 'title' and 'tasks', got a list",
        id="top-level-not-a-mapping",
    ),
    pytest.param("tasks: []\n", 1, "the plan has no 'title'", id="missing-title"),
    pytest.param(
        HEAD.replace("title: T", 'title: ""') + "      - {id: r, read: a}\n",
        1,
        "'title' of the plan is empty",
        id="empty-title",
    ),
    pytest.param(
        "title: T\n", 1, "the plan has no 'tasks'; give it a list of tasks", id="missing-tasks"
    ),
    pytest.param(
        "title: T\ntasks: []\n",
        2,
        "'tasks' of the plan is empty; give it at least one task",
        id="empty-tasks",
    ),
    pytest.param(
        "title: T\ntasks:\n  - title: A\n    steps: [{id: r, read: a}]\n",
        3,
        "task 1 has no 'id'",
        id="task-without-id",
    ),
    pytest.param(
        "title: T\ntasks:\n  - id: a\n    steps: [{id: r, read: a}]\n",
        3,
        "task 'a' has no 'title'",
        id="task-without-title",
    ),
    pytest.param(
        "title: T\ntasks:\n  - id: a\n    title: A\n",
        3,
        "task 'a' has no 'steps'; give it a list of steps",
        id="task-without-steps",
    ),
    pytest.param(
        "title: T\ntasks:\n  - id: a\n    title: A\n    steps: []\n",
        5,
        "'steps' of task 'a' is empty; give it at least one step",
        id="task-empty-steps",
    ),
    pytest.param(
        steps("- {id: s, timeout: 3}"),
        6,
        "step 's' has no kind key; give it exactly one of: "
        "read, write, edit, run, model, approve, commit, python",
        id="no-kind-key",
    ),
    pytest.param(
        steps("- id: x", "  run: make", "  write: out.txt", "  content: hi"),
        8,
        "step 'x' has both 'run' and 'write'; a step carries exactly one kind key",
        id="two-kind-keys",
    ),
    pytest.param(
        steps("- {id: x, run: a, read: b, model: c}"),
        6,
        "step 'x' has 3 kind keys ('run', 'read', 'model'); a step carries exactly one kind key",
        id="three-kind-keys",
    ),
    pytest.param(
        steps("- id: w", "  write: out.txt", "  contnet: hi"),
        8,
        "unknown key 'contnet' in step 'w'; did you mean 'content'? "
        "(a write step takes: id, title, write, content)",
        id="unknown-key-suggested",
    ),
    pytest.param(
        steps("- {id: r, run: make, retries: 3}"),
        6,
        f"unknown key 'retries' in step 'r' {RUN_KEYS}",
        id="unknown-key-listed",
    ),
    pytest.param(
        "titel: T\ntasks: [{id: a, title: A, steps: [{id: r, read: a}]}]\n",
        1,
        "unknown key 'titel' in the plan; did you mean 'title'? (the plan takes: title, tasks)",
        id="unknown-plan-key",
    ),
    pytest.param(
        "title: T\ntasks:\n  - id: a\n    title: A\n    stpes: [{id: r, read: a}]\n",
        5,
        "unknown key 'stpes' in task 'a'; did you mean 'steps'? (a task takes: id, title, steps)",
        id="unknown-task-key",
    ),
    pytest.param(
        steps("- id: r", "  run: make", "  content: hi"),
        8,
        f"'content' does not belong in run step 'r' {RUN_KEYS}",
        id="key-of-another-kind",
    ),
    pytest.param(
        steps("- {id: e, edit: a.txt, old: x, new: y, timeout: 5}"),
        6,
        "'timeout' does not belong in edit step 'e' "
        "(an edit step takes: id, title, edit, old, new)",
        id="key-of-run-on-edit",
    ),
    pytest.param(
        steps("- {id: w, write: out.txt}"),
        6,
        "write step 'w' has no 'content'",
        id="write-without-content",
    ),
    pytest.param(
        steps("- {id: w, write: out.txt, content: null}"),
        6,
        "'content' of write step 'w' must be a string, got nothing (null)",
        id="write-null-content",
    ),
    pytest.param(
        steps("- {id: e, edit: a.txt, new: y}"),
        6,
        "edit step 'e' has no 'old'",
        id="edit-without-old",
    ),
    pytest.param(
        steps("- {id: e, edit: a.txt, old: x}"),
        6,
        "edit step 'e' has no 'new'",
        id="edit-without-new",
    ),
    pytest.param(
        steps("- {id: e, edit: a.txt, old: '', new: y}"),
        6,
        "'old' of edit step 'e' is empty; give the text to replace",
        id="edit-empty-old",
    ),
    pytest.param(
        steps("- id: e", "  edit: a.txt", "  old: same", "  new: same"),
        9,
        "'old' and 'new' of step 'e' are the same; the edit would change nothing",
        id="edit-old-equals-new",
    ),
    pytest.param(
        steps("- {id: s, read: a}") + "  - id: other\n    title: O\n    steps:\n"
        "      - {id: s, read: b}\n",
        10,
        "duplicate step id 's'; it is already used on line 6",
        id="duplicate-step-id-across-tasks",
    ),
    pytest.param(
        steps("- {id: s, read: a}") + "  - id: main\n    title: Again\n    steps:\n"
        "      - {id: t, read: b}\n",
        7,
        "duplicate task id 'main'; it is already used on line 3",
        id="duplicate-task-id",
    ),
    pytest.param(
        steps("- {id: two words, read: a}"),
        6,
        "step id 'two words' is not valid: use 1 to 64 letters, digits, '_', '.' or "
        "'-', starting with a letter or digit",
        id="id-with-space",
    ),
    pytest.param(
        steps("- {id: -dash, read: a}"), 6, "step id '-dash' is not valid", id="id-leading-dash"
    ),
    pytest.param(
        steps("- {id: " + "x" * 65 + ", read: a}"),
        6,
        f"step id '{'x' * 65}' is not valid: use 1 to 64",
        id="id-too-long",
    ),
    pytest.param(
        steps("- {id: 7, read: a}"),
        6,
        "the id of step 1 of task 'main' must be a string, got the number 7; put it in quotes",
        id="id-not-a-string",
    ),
    pytest.param(
        steps("- {id: r, run: make, timeout: 0}"),
        6,
        f"'timeout' of step 'r' must be {TIMEOUT_RULE}, got the number 0",
        id="timeout-zero",
    ),
    pytest.param(
        steps("- {id: r, run: make, timeout: -5}"),
        6,
        f"'timeout' of step 'r' must be {TIMEOUT_RULE}, got the number -5",
        id="timeout-negative",
    ),
    pytest.param(
        steps("- {id: r, run: make, timeout: 2 minutes}"),
        6,
        f"'timeout' of step 'r' must be {TIMEOUT_RULE}, got the text '2 minutes'",
        id="timeout-text",
    ),
    pytest.param(
        steps("- {id: r, run: make, timeout: true}"),
        6,
        f"'timeout' of step 'r' must be {TIMEOUT_RULE}, got true",
        id="timeout-bool",
    ),
    pytest.param(
        steps("- {id: r, run: make, timeout: .inf}"),
        6,
        f"'timeout' of step 'r' must be {TIMEOUT_RULE}, got the number inf",
        id="timeout-infinite",
    ),
    pytest.param(
        steps("- {id: r, run: make, idempotent: 'yes'}"),
        6,
        "'idempotent' of step 'r' must be true or false, got the text 'yes'",
        id="idempotent-not-bool",
    ),
    pytest.param(
        steps("- {id: r, run: make, paths: build.log}"),
        6,
        "'paths' of step 'r' must be a list of strings, got the text 'build.log'",
        id="paths-not-a-list",
    ),
    pytest.param(
        steps("- id: r", "  run: make", "  paths:", "    - out/*.o", "    - 3"),
        10,
        "'paths' of step 'r' must be a list of strings, got the number 3 as item 2",
        id="paths-item-not-a-string",
    ),
    pytest.param(
        steps("- {id: p, python: mypkg.tasks.check}"),
        6,
        "step 'p': python target 'mypkg.tasks.check' is not of the form 'module.path:function'",
        id="python-without-colon",
    ),
    pytest.param(
        steps("- {id: p, python: 'my-pkg:check'}"),
        6,
        "step 'p': python target 'my-pkg:check' is not of the form 'module.path:function'",
        id="python-bad-module",
    ),
    pytest.param(
        steps("- {id: r, run: ''}"), 6, "step 'r' has an empty command", id="empty-command"
    ),
    pytest.param(
        steps("- {id: q, approve: '  '}"), 6, "step 'q' has an empty question", id="empty-question"
    ),
    pytest.param(
        steps("- {id: m, model: ''}"), 6, "step 'm' has an empty prompt", id="empty-prompt"
    ),
    pytest.param(
        steps("- {id: c, commit: ''}"), 6, "step 'c' has an empty message", id="empty-message"
    ),
    pytest.param(steps("- {id: r, read: ''}"), 6, "step 'r' has an empty path", id="empty-path"),
    pytest.param(
        steps("- {id: r, run: [make, test]}"),
        6,
        "the command of step 'r' must be a string, got a list",
        id="command-not-text",
    ),
    pytest.param(
        steps("- {id: r, read: /etc/passwd}"),
        6,
        "step 'r': path '/etc/passwd' is absolute; paths are relative to the workspace",
        id="absolute-path",
    ),
    pytest.param(
        steps("- {id: w, write: src/../../x, content: ''}"),
        6,
        "step 'w': path 'src/../../x' leads outside the workspace",
        id="escaping-path",
    ),
    pytest.param(
        steps("- just-a-string"),
        6,
        "step 1 of task 'main' must be a mapping with an 'id' and one kind key, "
        "got the text 'just-a-string'",
        id="step-not-a-mapping",
    ),
    pytest.param(
        steps("- {id: r, read: a, title: ''}"),
        6,
        "'title' of step 'r' is empty",
        id="empty-step-title",
    ),
]


@pytest.mark.parametrize(("text", "line", "wording"), REFUSALS)
def test_refuses(tmp_path: Path, text: str, line: int, wording: str) -> None:
    path = write(tmp_path, text)
    assert f"{path}:{line}: {wording}" in refusal(path)


def test_reports_every_problem_of_the_file_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        steps(
            "- {id: a, run: make, contnet: x}",
            "- {id: a, write: out.txt}",
            "- {id: c, python: nope}",
        ),
    )
    assert refusal(path).splitlines() == [
        f"{path}: 4 problems in the plan",
        f"{path}:6: unknown key 'contnet' in step 'a' {RUN_KEYS}",
        f"{path}:7: duplicate step id 'a'; it is already used on line 6",
        f"{path}:7: write step 'a' has no 'content'",
        f"{path}:8: step 'c': python target 'nope' is not of the form 'module.path:function'",
    ]


def test_refuses_duplicate_yaml_keys_naming_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- id: r", "  run: make", "  timeout: 5", "  timeout: 50"))
    assert refusal(path) == (
        f"{path}:9: duplicate key 'timeout'; it is already on line 8 "
        "(YAML would silently keep only the last one)"
    )


def test_refuses_duplicate_keys_at_the_top_level(tmp_path: Path) -> None:
    path = write(tmp_path, "title: One\n" + HEAD.replace("title: T\n", "title: Two\n"))
    assert f"{path}:2: duplicate key 'title'; it is already on line 1" in refusal(path)


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- {id: r, run: make", "- {id: s, read: a}"))
    message = refusal(path)
    assert message.startswith(f"{path}:7: invalid YAML at column ")
    assert "while parsing a flow mapping on line 6" in message


def test_tabs_for_indentation_are_refused_with_their_line(tmp_path: Path) -> None:
    path = write(tmp_path, "title: T\ntasks:\n\t- id: a\n")
    assert refusal(path).startswith(f"{path}:3: invalid YAML")


def test_two_documents_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- {id: r, read: a}") + "---\ntitle: Other\n")
    assert refusal(path).startswith(f"{path}:7: invalid YAML at column 1: but found another")


def test_a_control_character_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- {id: r, run: 'make \x07'}"))
    assert refusal(path) == f"{path}:6: invalid YAML: the character U+0007 is not allowed in YAML"


def test_a_value_yaml_cannot_build_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- {id: r, commit: 2024-13-45}"))
    assert refusal(path) == (
        f"{path}:6: cannot read '2024-13-45': month must be in 1..12; "
        "put it in quotes if it is text"
    )


def test_unsafe_tags_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- {id: r, run: !!python/object/apply:os.system [echo hi]}"))
    message = refusal(path)
    assert message.startswith(f"{path}:6: invalid YAML at column ")
    assert "could not determine a constructor" in message


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing here yet\n")
    assert refusal(path) == f"{path}: the plan is empty; it needs a 'title' and a list of 'tasks'"


def test_a_missing_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "nope.yml"
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.message == f"plan file not found: {path}"
    assert info.value.hint


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="is not a plan file: it is a directory"):
        load_plan(tmp_path)


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, DESIGN_EXAMPLE)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read any file")
        with pytest.raises(PlanError, match=rf"^cannot read plan file {re.escape(str(path))}: "):
            load_plan(path)
    finally:
        path.chmod(0o600)


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yml"
    path.write_bytes(b"title: T\ntasks:\n  - id: caf\xe9\n")
    assert refusal(path) == f"{path}:3: not UTF-8 text (byte 28)"


def test_an_aliased_step_is_a_duplicate_reported_near_its_use(tmp_path: Path) -> None:
    path = write(tmp_path, steps("- &shared {id: s, read: a}", "- *shared"))
    assert refusal(path) == f"{path}:5: duplicate step id 's'; it is already used on line 6"


def test_merge_keys_work_and_keep_lines(tmp_path: Path) -> None:
    text = steps("- &base {id: a, run: make, timeout: 5}", "- <<: *base", "  id: b")
    plan = load_plan(write(tmp_path, text))
    assert [(s.id, s.timeout, s.line) for s in plan.steps()] == [("a", 5.0, 6), ("b", 5.0, 7)]
