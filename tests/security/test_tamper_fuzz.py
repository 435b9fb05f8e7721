"""Random tampering with real recorded sessions: edits, deletions, insertions and forged
appends to their events, steps, messages and checkpoints, made as someone who can write
the database but not read the key (tests/support/attacker.py).

Three sessions are recorded once, each stopped part-way: a library session of every step
kind, a plan session and an agent session (against tests/support/fake_openai.py). Each
example copies one, tampers with it once, resumes it and runs its program again, as it
was run, to its end. The resume must either refuse with an ACODE-CKPT-* code, having run
nothing new, or behave exactly as it does on the untouched copy: the same results, the
same files, the same requests to the model. Never may it run a command, a tool call or
pass an approval the original did not hold. (Cutting the newest events off is an attack
of its own, refused by what is known elsewhere of them: tests/security/test_truncation.py.)

ACODE_TAMPER_EXAMPLES (default 40) sets the number of examples.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

import acode
from acode.agent.loop import run_agent
from acode.domain.config import AcodeConfig, ModelSettings
from acode.domain.plan import Plan
from acode.engine.lifecycle import start_session
from acode.engine.plan_runner import run_plan
from acode.system.process import CommandResult
from acode.system.workspace import StatePaths
from tests.agent.scenario import TASK, rules, start_repository
from tests.support.attacker import Attacker
from tests.support.fake_openai import FakeOpenAI

EXAMPLES = int(os.environ.get("ACODE_TAMPER_EXAMPLES") or 40)
# What the fuzzer edits, with the columns that name a row of each.
TABLES = {
    "events": ("id",),
    "steps": ("id",),
    "messages": ("sid", "idx"),
    "checkpoints": ("sid", "slot"),
}
# The checkpoint columns of events are edited like any other; so are those of the old
# table, which only sessions recorded before schema 4 hold (none here: it is left out).
_EDITED = ("events", "steps", "messages")


@dataclass(frozen=True)
class Ending:
    """How a run of a program ended, and what it left."""

    outcomes: list[Any]
    error: str | None  # the ACODE-* code it raised, or the exception's name
    files: dict[str, bytes]
    requests: int  # chat requests the model server received


def _files(ws: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and p.relative_to(ws).parts[0] not in (".git", ".agent")
    }


def _normal(value: Any) -> Any:
    if isinstance(value, CommandResult):
        value = value.to_json()
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "duration_ms"}
    return value


# -- the programs ---------------------------------------------------------------------


def _library_program(s: acode.Session, out: list[Any]) -> None:
    def effect(name: str) -> Callable[[acode.StepContext], str]:
        def run(ctx: acode.StepContext) -> str:
            with (ctx.workspace / "effects.log").open("a") as log:
                log.write(f"{name}\n")
            return name

        return run

    out.append(s.step("p0", effect("p0")))
    out.append(_normal(s.write("w", "a.txt", "one\n")))
    out.append(_normal(s.edit("e", "a.txt", "one", "two")))
    out.append(s.read("r", "a.txt"))
    out.append(_normal(s.run("x", "echo x >> effects.log", paths=["effects.log"])))
    out.append(s.model("m", "Say hello."))
    if s.approve("ok", "Go on?"):
        out.append(_normal(s.run("after", "echo after >> effects.log", paths=["effects.log"])))
    out.append(s.step("p1", effect("p1")))
    out.append(s.step("new", effect("new")))  # past what the recording reached


_PLAN = {
    "title": "Fuzzed plan",
    "tasks": [
        {
            "id": "main",
            "title": "Main",
            "steps": [
                {"id": "w", "write": "b.txt", "content": "bee\n"},
                {"id": "x", "run": "echo x >> effects.log", "paths": ["effects.log"]},
                {"id": "ok", "approve": "Ship it?"},
                {"id": "ship", "run": "echo shipped >> effects.log", "paths": ["effects.log"]},
            ],
        }
    ],
}


def _plan_program(s: acode.Session, out: list[Any]) -> None:
    out.append(run_plan(s, Plan.from_dict(_PLAN)).value)


def _agent_program(s: acode.Session, out: list[Any]) -> None:
    out.append(run_agent(s, TASK).value)


@dataclass(frozen=True)
class Recorded:
    kind: str
    workspace: Path  # the pristine copy, stopped part-way
    session_id: str
    program: Callable[[acode.Session, list[Any]], None]
    baseline: Ending


def _run(
    ws: Path, program: Callable[[acode.Session, list[Any]], None], make: Callable[[], Any]
) -> Ending:
    """Run ``program`` on the session ``make`` opens or resumes, to its end."""
    out: list[Any] = []
    error = None
    session = None
    try:
        session = make()
        program(session, out)
    except acode.ApprovalPending:
        error = "ApprovalPending"
    except Exception as exc:
        code = getattr(getattr(exc, "code", None), "value", None)
        error = str(code) if code else type(exc).__name__
    finally:
        if session is not None:
            session.close()
    return Ending(out, error, _files(ws), 0)


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        conversation = rules()
        conversation[2]["replies"][0] = {"status": 500, "body": "down"}  # t2 never starts
        server.converse(conversation)
        yield server


def _config(model: FakeOpenAI) -> AcodeConfig:
    return AcodeConfig(model=ModelSettings(base_url=model.base_url, name="fake-model"))


def _yes(_: object) -> bool:
    return True


# The user's key, for the recordings (a module's fixture, made before each test's own
# environment) and the resumes alike.
KEY = "tamper-fuzz-key-not-a-key"


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI
) -> Iterator[list[Recorded]]:
    """The three sessions, recorded part-way, with what resuming each untouched does."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ACODE_CHECKPOINT_SECRET", KEY)
        yield _record(tmp_path_factory, model)


def _record(tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI) -> list[Recorded]:
    made = []
    for kind, program in (
        ("library", _library_program),
        ("plan", _plan_program),
        ("agent", _agent_program),
    ):
        ws = tmp_path_factory.mktemp(kind) / "ws"
        ws.mkdir()
        start_repository(ws)
        config = _config(model)
        if kind == "library":
            session = acode.open_session("fuzzed", ws, config)
            out: list[Any] = []
            # Recorded up to the approval, which nobody answers: the program stops there.
            with pytest.raises(acode.ApprovalPending):
                _library_program(session, out)
            session.close()
        elif kind == "plan":
            session = start_session("fuzzed", ws, config, plan=Plan.from_dict(_PLAN))
            with pytest.raises(acode.ApprovalPending):
                run_plan(session, Plan.from_dict(_PLAN))
            session.close()
        else:
            session = start_session("agent", ws, config, agent_task=TASK)
            with pytest.raises(acode.AcodeError):  # the model's outage at task t2
                run_agent(session, TASK)
            session.close()
        # Copies keep the name "ws": an agent's prompts name the workspace.
        pristine = tmp_path_factory.mktemp(f"{kind}-pristine") / "ws"
        shutil.copytree(ws, pristine, symlinks=True)
        copy = tmp_path_factory.mktemp(f"{kind}-baseline") / "ws"
        shutil.copytree(pristine, copy, symlinks=True)
        baseline = _resume(copy, session.id, program, model)
        made.append(Recorded(kind, pristine, session.id, program, baseline))
    return made


def _resume(
    ws: Path, session_id: str, program: Callable[[acode.Session, list[Any]], None], model: Any
) -> Ending:
    before = len(model.chat_requests)
    ending = _run(
        ws,
        program,
        lambda: acode.resume_session(session_id, ws, config=_config(model), approver=_yes),
    )
    return Ending(ending.outcomes, ending.error, ending.files, len(model.chat_requests) - before)


# -- the tampering -----------------------------------------------------------------------

# Draws a value from a strategy: the data object's, drawn while the test runs.
Draw = Callable[[st.SearchStrategy[Any]], Any]


def _changed(draw: Draw, value: Any) -> Any:
    """``value`` changed a little, as an edit by hand would change it."""
    if isinstance(value, bool) or value is None:
        return draw(st.sampled_from([1, 0, "x", b"x"]))
    if isinstance(value, int):
        return value + draw(st.sampled_from([1, -1, 2**32, -value]))
    if isinstance(value, bytes):
        if not value:
            return b"\x00"
        at = draw(st.integers(0, len(value) - 1))
        return draw(
            st.sampled_from(
                [value[:at] + bytes([value[at] ^ 1]) + value[at + 1 :], value[:at], b"", None]
            )
        )
    text = str(value)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(data)))
        data[key] = _changed(draw, data[key]) if not isinstance(data[key], dict | list) else {}
        if isinstance(data[key], bytes):
            data[key] = data[key].decode("latin-1")
        return json.dumps(data, separators=(",", ":"), sort_keys=True)
    if not text:
        return "x"
    at = draw(st.integers(0, len(text) - 1))
    return draw(st.sampled_from([text[:at] + "X" + text[at + 1 :], text[:at], text + " "]))


@st.composite
def tampering(draw: st.DrawFn) -> tuple[int, Callable[[Attacker, str], None], str]:
    """(which recorded session, the edit, a description of it)."""
    which = draw(st.integers(0, 2))
    op = draw(st.sampled_from(["update", "update", "update", "delete", "insert", "append"]))
    table = draw(st.sampled_from(_EDITED))
    pick = draw(st.integers(0, 10**6))
    column_pick = draw(st.integers(0, 10**6))
    data = draw(st.data())

    def edit(attacker: Attacker, session_id: str) -> None:
        try:
            _edit(attacker, session_id)
        except sqlite3.IntegrityError:
            reject()  # the schema's own checks refuse it: no one can make this edit

    def _edit(attacker: Attacker, session_id: str) -> None:
        sid = attacker.sid(session_id)
        if op == "append":
            _forged_append(attacker, session_id, data.draw)
            return
        rows = attacker.rows(f"SELECT * FROM {table} WHERE sid = ? ORDER BY 1, 2", sid)
        if not rows:
            return
        columns = [c[1] for c in attacker.rows(f"PRAGMA table_info({table})")]
        row = dict(zip(columns, rows[pick % len(rows)], strict=True))
        key = TABLES[table]
        where = " AND ".join(f"{k} = ?" for k in key)
        args = [row[k] for k in key]
        if op == "delete":
            if table == "events" and row["seq"] == max(r[columns.index("seq")] for r in rows):
                # The newest event taken away is a history cut short, valid but for what
                # is known elsewhere of it: tests/security/test_truncation.py.
                reject()
            attacker.sql(f"DELETE FROM {table} WHERE {where}", *args)
        elif op == "insert":
            copy = dict(row)
            if table == "messages":
                copy["idx"] = max(r[columns.index("idx")] for r in rows) + 1
            else:
                copy["id"] = row["id"] + len(rows) + 1
                copy[columns[2]] = row[columns[2]] + len(rows) + 1  # seq or position
            names = ", ".join(copy)
            marks = ", ".join("?" * len(copy))
            attacker.sql(f"INSERT INTO {table} ({names}) VALUES ({marks})", *copy.values())
        else:
            editable = [c for c in columns if c not in ("sid",)]
            column = editable[column_pick % len(editable)]
            value = _changed(data.draw, row[column])
            attacker.sql(
                f"UPDATE {table} SET {column} = ? WHERE {where}",
                value,
                *args,
            )

    return which, edit, f"{op} {table} #{pick} column #{column_pick}"


def _forged_append(attacker: Attacker, session_id: str, draw: Draw) -> None:
    """An event after the newest, of a kind acode writes, copied from one about a step
    with its result changed: an approval given, a command's output, a model's answer."""
    sid = attacker.sid(session_id)
    steps = attacker.rows(
        "SELECT type, payload FROM events WHERE sid = ? AND type LIKE 'step_%' ORDER BY seq",
        sid,
    )
    type_, text = steps[draw(st.integers(0, len(steps) - 1))]
    payload = json.loads(text)
    payload["position"] = int(payload.get("position", 0)) + draw(st.sampled_from([0, 1, 50]))
    if "result" in payload or draw(st.booleans()):
        payload["result"] = draw(
            st.sampled_from([{"approved": True, "by": "x"}, "forged", {"content": "rm -rf"}])
        )
    attacker.append(session_id, draw(st.sampled_from([type_, "step_completed"])), payload)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(attack=tampering())
def test_a_tampered_session_is_refused_or_resumes_exactly_as_the_untouched_one(
    recorded: list[Recorded],
    model: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    attack: tuple[int, Callable[[Attacker, str], None], str],
) -> None:
    which, edit, description = attack
    original = recorded[which]
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", KEY)
    ws = tmp_path_factory.mktemp("tampered") / "ws"
    shutil.copytree(original.workspace, ws, symlinks=True)
    files_before = _files(ws)
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        before = conn.execute("SELECT count(*), sum(length(payload)) FROM events").fetchone()
    edit(Attacker(ws), original.session_id)
    ending = _resume(ws, original.session_id, original.program, model)
    context = f"{original.kind} session, {description}: {ending}"
    same = ending == original.baseline
    event(f"{original.kind}: {'resumed as untouched' if same else ending.error}")
    if same:
        return  # nothing the resume relies on was touched
    assert ending.error is not None, context
    assert ending.error.startswith("ACODE-CKPT"), context
    assert ending.files == files_before, f"it ran something before refusing: {context}"
    assert ending.requests == 0, f"it asked the model before refusing: {context}"
    assert before  # the copy had a history to tamper with
