"""The checks of a plan file: plain data in, a Plan or every problem with its line out.

Pure: no YAML and no I/O. The loader (``acode.engine.plan_loader``) hands over the parsed
data and a ``line_of`` function that maps a node path such as ``("tasks", 1, "steps", 0,
"write")`` to its line, so every problem is reported as ``<file>:<line>: <problem>``, and
all the problems of a file are reported together, before anything runs. The values it
builds are those of ``acode.domain.plan``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from acode.domain.durations import TIMEOUT_RULE, is_timeout
from acode.domain.kinds import STEP_KINDS, StepKind
from acode.domain.paths import file_path_problem, path_problem
from acode.domain.plan import Plan, StepSpec, TaskSpec
from acode.errors import PlanError

__all__ = [
    "LineLookup",
    "NodePath",
    "PlanProblem",
    "build_plan",
    "build_step",
    "plan_error",
]

NodePath: TypeAlias = tuple[str | int, ...]
LineLookup: TypeAlias = Callable[[NodePath], int | None]


_KIND_NAMES = tuple(kind.value for kind in StepKind)
_KIND_KEYS = frozenset(_KIND_NAMES)
_EXTRA_KEYS = {kind: spec.keys for kind, spec in STEP_KINDS.items()}
# What the value of the kind key is, for messages such as "step 'x' has an empty command".
_TARGET_NOUN = {kind: spec.target for kind, spec in STEP_KINDS.items()}
_FILE_KINDS = frozenset({StepKind.READ, StepKind.WRITE, StepKind.EDIT})
# Kinds whose target goes to a process as an argument (a shell's, git's), where NUL ends it.
_ARGUMENT_KINDS = frozenset({StepKind.RUN, StepKind.COMMIT})
_PLAN_KEYS = ("title", "tasks")
_TASK_KEYS = ("id", "title", "steps")
_ALL_STEP_KEYS = ("id", "title", *_KIND_NAMES, *(k for keys in _EXTRA_KEYS.values() for k in keys))
_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ID_RULE = "use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def _step_keys(kind: StepKind) -> tuple[str, ...]:
    return ("id", "title", kind.value, *_EXTRA_KEYS[kind])


@dataclass(frozen=True)
class PlanProblem:
    """One thing wrong with a plan file; ``line`` is 1-based, None when unknown."""

    line: int | None
    message: str

    def render(self, source: str) -> str:
        where = source if self.line is None else f"{source}:{self.line}"
        return f"{where}: {self.message}"


def build_step(data: Mapping[str, object], task_id: str) -> StepSpec:
    """Validate one step as ``StepSpec.to_dict()`` writes it and build it; raises PlanError."""
    checker = _Checker(source="recorded step", line_of=_no_lines)
    step = _step(checker, data, (), "step", task_id)
    if step is None or checker.problems:
        raise plan_error(checker.source, checker.problems)
    return step


def build_plan(data: object, *, source: str, line_of: LineLookup | None = None) -> Plan:
    """Validate plain data (as parsed from a plan file) and build the Plan.

    Raises PlanError listing every problem as ``<source>:<line>: <problem>``.
    """
    checker = _Checker(source=source, line_of=line_of or _no_lines)
    plan = _plan(checker, data)
    if plan is None or checker.problems:
        raise plan_error(source, checker.problems)
    return plan


def plan_error(source: str, problems: Sequence[PlanProblem]) -> PlanError:
    """The PlanError for these problems, one ``<source>:<line>: <problem>`` line each."""
    ordered = sorted(problems, key=lambda p: p.line or 0)
    lines = [problem.render(source) for problem in ordered]
    if len(lines) > 1:
        lines.insert(0, f"{source}: {len(lines)} problems in the plan")
    return PlanError(
        "\n".join(lines),
        hint="Fix the plan and run again; docs/plans.md lists every step kind and its keys.",
    )


def _no_lines(path: NodePath) -> int | None:
    return None


@dataclass
class _Checker:
    """Collects every problem of one plan, so that a person can fix them all in one pass."""

    source: str
    line_of: LineLookup
    problems: list[PlanProblem] = field(default_factory=list)
    first_use: dict[tuple[str, str], int | None] = field(default_factory=dict)

    def line(self, path: NodePath) -> int | None:
        # A node the lookup does not know (reached through a YAML alias, say) is reported
        # at its nearest known ancestor rather than at no line at all.
        for end in range(len(path), -1, -1):
            found = self.line_of(path[:end])
            if found is not None:
                return found
        return None

    def add(self, path: NodePath, message: str) -> None:
        self.problems.append(PlanProblem(line=self.line(path), message=message))

    def claim(self, what: str, ident: str, path: NodePath) -> None:
        """Record the use of a task or step id; a second use is a problem naming both lines."""
        key = (what, ident)
        if key not in self.first_use:
            self.first_use[key] = self.line(path)
            return
        first = self.first_use[key]
        where = f"on line {first}" if first is not None else f"by an earlier {what}"
        self.add(path, f"duplicate {what} id {ident!r}; it is already used {where}")


def _plan(c: _Checker, data: object) -> Plan | None:
    if data is None:
        c.add((), "the plan is empty; it needs a 'title' and a list of 'tasks'")
        return None
    if not isinstance(data, Mapping):
        c.add((), f"the plan must be a mapping with 'title' and 'tasks', got {_describe(data)}")
        return None
    _check_keys(c, data, (), _PLAN_KEYS, owner="the plan", takes="the plan takes")
    title = _text(c, data, (), "title", "the plan")
    raw_tasks = _items(c, data, (), "tasks", owner="the plan", item="task")
    tasks = [_task(c, raw, ("tasks", i), i) for i, raw in enumerate(raw_tasks or ())]
    if title is None or c.problems:
        return None
    return Plan(title=title, tasks=tuple(task for task in tasks if task is not None))


def _task(c: _Checker, raw: object, path: NodePath, index: int) -> TaskSpec | None:
    if not isinstance(raw, Mapping):
        c.add(
            path,
            f"task {index + 1} must be a mapping with 'id', 'title' and 'steps', "
            f"got {_describe(raw)}",
        )
        return None
    before = len(c.problems)
    owner = _label("task", raw, f"task {index + 1}")
    _check_keys(c, raw, path, _TASK_KEYS, owner=owner, takes="a task takes")
    task_id = _ident(c, raw, path, owner, "task")
    title = _text(c, raw, path, "title", owner)
    raw_steps = _items(c, raw, path, "steps", owner=owner, item="step")
    steps = [
        _step(c, step, (*path, "steps", j), f"step {j + 1} of {owner}", task_id or "")
        for j, step in enumerate(raw_steps or ())
    ]
    if task_id is None or title is None or len(c.problems) > before:
        return None
    return TaskSpec(
        id=task_id,
        title=title,
        steps=tuple(step for step in steps if step is not None),
        line=c.line(path),
    )


@dataclass(frozen=True)
class _Extras:
    """The keys beside the kind key; each kind fills in its own."""

    content: str | None = None
    old: str | None = None
    new: str | None = None
    idempotent: bool = False
    timeout: float | None = None
    paths: tuple[str, ...] = ()
    check: str | None = None


def _step(c: _Checker, raw: object, path: NodePath, fallback: str, task_id: str) -> StepSpec | None:
    if not isinstance(raw, Mapping):
        c.add(
            path,
            f"{fallback} must be a mapping with an 'id' and one kind key, got {_describe(raw)}",
        )
        return None
    before = len(c.problems)
    owner = _label("step", raw, fallback)
    kind = _kind(c, raw, path, owner)
    step_id = _ident(c, raw, path, owner, "step")
    title = _text(c, raw, path, "title", owner, required=False)
    if kind is None:
        return None
    target = _target(c, raw, path, owner, kind)
    extras = _extras(c, raw, path, owner, kind)
    if step_id is None or target is None or len(c.problems) > before:
        return None
    return StepSpec(
        id=step_id,
        kind=kind,
        task_id=task_id,
        target=target,
        title=title or "",
        content=extras.content,
        old=extras.old,
        new=extras.new,
        idempotent=extras.idempotent,
        timeout=extras.timeout,
        paths=extras.paths,
        check=extras.check,
        line=c.line(path),
    )


def _extras(
    c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str, kind: StepKind
) -> _Extras:
    if kind is StepKind.WRITE:
        return _Extras(content=_text(c, raw, path, "content", f"write {owner}", empty_ok=True))
    if kind is StepKind.EDIT:
        return _edit(c, raw, path, owner)
    if kind is StepKind.RUN:
        return _run(c, raw, path, owner)
    return _Extras()


def _kind(c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str) -> StepKind | None:
    found = [key for key in raw if key in _KIND_KEYS]
    if len(found) == 1:
        kind = StepKind(found[0])
        _check_keys(
            c,
            raw,
            path,
            _step_keys(kind),
            owner=owner,
            takes=f"{_article(kind.value)} {kind.value} step takes",
            kind=kind,
        )
        return kind
    if not found:
        c.add(
            path,
            f"{owner} has no kind key; give it exactly one of: {', '.join(_KIND_NAMES)}",
        )
    elif len(found) == 2:
        c.add(
            _sub(path, found[1]),
            f"{owner} has both {found[0]!r} and {found[1]!r}; a step carries exactly one kind key",
        )
    else:
        c.add(
            _sub(path, found[1]),
            f"{owner} has {len(found)} kind keys ({_quoted(found)}); "
            "a step carries exactly one kind key",
        )
    _check_keys(c, raw, path, _ALL_STEP_KEYS, owner=owner, takes="a step takes")
    return None


def _check_keys(
    c: _Checker,
    data: Mapping[Any, Any],
    path: NodePath,
    allowed: Sequence[str],
    *,
    owner: str,
    takes: str,
    kind: StepKind | None = None,
) -> None:
    """Refuse keys not in ``allowed``: a misspelling gets a suggestion, and a key of another
    step kind (``content`` on a run step) is named as not belonging rather than unknown."""
    listing = f"({takes}: {', '.join(allowed)})"
    for key in data:
        if key in allowed:
            continue
        if kind is not None and key in _ALL_STEP_KEYS:
            c.add(
                _sub(path, key),
                f"{key!r} does not belong in {kind.value} {owner} {listing}",
            )
            continue
        import difflib  # only a plan with a mistake in it needs it

        matches = difflib.get_close_matches(key, allowed, n=1) if isinstance(key, str) else []
        suggestion = f"; did you mean {matches[0]!r}?" if matches else ""
        c.add(_sub(path, key), f"unknown key {key!r} in {owner}{suggestion} {listing}")


def _ident(
    c: _Checker, data: Mapping[Any, Any], path: NodePath, owner: str, what: str
) -> str | None:
    if "id" not in data:
        c.add(path, f"{owner} has no 'id'")
        return None
    value = data["id"]
    if not isinstance(value, str):
        c.add(
            (*path, "id"),
            f"the id of {owner} must be a string, got {_describe(value)}; put it in quotes",
        )
        return None
    if not _ID_PATTERN.fullmatch(value):
        c.add((*path, "id"), f"{what} id {value!r} is not valid: {_ID_RULE}")
        return None
    c.claim(what, value, path)
    return value


def _text(
    c: _Checker,
    data: Mapping[Any, Any],
    path: NodePath,
    key: str,
    owner: str,
    *,
    required: bool = True,
    empty_ok: bool = False,
) -> str | None:
    if key not in data:
        if required:
            c.add(path, f"{owner} has no {key!r}")
        return None
    value = data[key]
    if not isinstance(value, str):
        c.add((*path, key), f"{key!r} of {owner} must be a string, got {_describe(value)}")
        return None
    if not empty_ok and not value.strip():
        c.add((*path, key), f"{key!r} of {owner} is empty")
        return None
    return value


def _items(
    c: _Checker, data: Mapping[Any, Any], path: NodePath, key: str, *, owner: str, item: str
) -> list[object] | None:
    if key not in data:
        c.add(path, f"{owner} has no {key!r}; give it a list of {item}s")
        return None
    value = data[key]
    if not isinstance(value, list):
        c.add((*path, key), f"{key!r} of {owner} must be a list of {item}s, got {_describe(value)}")
        return None
    if not value:
        c.add((*path, key), f"{key!r} of {owner} is empty; give it at least one {item}")
        return None
    return value


def _target(
    c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str, kind: StepKind
) -> str | None:
    key_path = (*path, kind.value)
    value = raw[kind.value]
    noun = _TARGET_NOUN[kind]
    if not isinstance(value, str):
        c.add(key_path, f"the {noun} of {owner} must be a string, got {_describe(value)}")
        return None
    if not value.strip():
        c.add(key_path, f"{owner} has an empty {noun}")
        return None
    if kind in _FILE_KINDS:
        problem = file_path_problem(value)
    elif kind is StepKind.PYTHON:
        problem = _python_problem(value)
    elif kind in _ARGUMENT_KINDS and "\0" in value:
        problem = f"the {noun} contains a NUL byte, which no command holds"
    else:
        problem = None
    if problem:
        c.add(key_path, f"{owner}: {problem}")
        return None
    return value


def _python_problem(target: str) -> str | None:
    module, colon, function = target.partition(":")
    parts = module.split(".")
    if colon and function.isidentifier() and all(part.isidentifier() for part in parts):
        return None
    return f"python target {target!r} is not of the form 'module.path:function'"


def _edit(c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str) -> _Extras:
    # Whitespace is worth editing (tabs to spaces), so only a truly empty `old` is refused.
    old = _text(c, raw, path, "old", f"edit {owner}", empty_ok=True)
    new = _text(c, raw, path, "new", f"edit {owner}", empty_ok=True)
    if old == "":
        c.add((*path, "old"), f"'old' of edit {owner} is empty; give the text to replace")
    elif old is not None and old == new:
        c.add(
            (*path, "new"),
            f"'old' and 'new' of {owner} are the same; the edit would change nothing",
        )
    return _Extras(old=old, new=new)


def _run(c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str) -> _Extras:
    idempotent = raw.get("idempotent", False)
    if not isinstance(idempotent, bool):
        c.add(
            (*path, "idempotent"),
            f"'idempotent' of {owner} must be true or false, got {_describe(idempotent)}",
        )
        idempotent = False
    check = _text(c, raw, path, "check", owner, required=False)
    if check is not None and "\0" in check:
        c.add((*path, "check"), f"'check' of {owner} contains a NUL byte, which no command holds")
        check = None
    return _Extras(
        idempotent=idempotent,
        timeout=_timeout(c, raw, path, owner),
        paths=_globs(c, raw, path, owner),
        check=check,
    )


def _timeout(c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str) -> float | None:
    value = raw.get("timeout")
    if value is None:
        return None
    if is_timeout(value):
        return float(value)
    c.add(
        (*path, "timeout"), f"'timeout' of {owner} must be {TIMEOUT_RULE}, got {_describe(value)}"
    )
    return None


def _globs(c: _Checker, raw: Mapping[Any, Any], path: NodePath, owner: str) -> tuple[str, ...]:
    value = raw.get("paths", [])
    key_path = (*path, "paths")
    if not isinstance(value, list):
        c.add(key_path, f"'paths' of {owner} must be a list of strings, got {_describe(value)}")
        return ()
    globs: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            c.add(
                (*key_path, i),
                f"'paths' of {owner} must be a list of strings, "
                f"got {_describe(item)} as item {i + 1}",
            )
            continue
        problem = path_problem(item)
        if problem:
            c.add((*key_path, i), f"{owner}: {problem}")
            continue
        globs.append(item)
    return tuple(globs)


def _label(what: str, data: Mapping[Any, Any], fallback: str) -> str:
    ident = data.get("id")
    return f"{what} {ident!r}" if isinstance(ident, str) and ident else fallback


def _sub(path: NodePath, key: object) -> NodePath:
    # YAML keys can be numbers, dates or null; only those a path can hold get a line of their own.
    return (*path, key) if isinstance(key, str | int) else path


def _quoted(keys: Iterable[object]) -> str:
    return ", ".join(repr(key) for key in keys)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}" if value.strip() else "an empty text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__} ({value})"
