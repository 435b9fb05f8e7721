"""A program of steps of every kind, run through the library with a fault injected at
one point of one step's life. The caller catches every error and goes on, as the agent
loop and library callers do; what each call returned or raised is its outcome.

Used in-process by tests/engine/test_step_faults.py (every fault) and, killed at a
seeded random instant, by tests/crash/test_step_faults.py, which runs it as

    python -m tests.support.step_faults --workspace WS --results FILE
        [--fault STEP:POINT[:once]] [--resume ID] [--kill-at N]

A fault is a step of the program and a point of its life:

  prepare, execute, value    the step kind's hooks (acode.engine.steps.base)
  function                   a python step's own function
  started                    the observer told that the step starts
  approver                   the approver asked for a decision
  start-record               the journal's commit of the step's start,
  completion-record          of its completion,
  blob-record                of the blobs it stores
  failure-record             the step fails at its first hook, and the commit of its
                             failure fails too, once

A fault raises RuntimeError every time its point is reached, in every process, as a bug
would. A fault marked ``once`` is the environment's: the database refuses the write for
real (SQLITE_READONLY), or the model server answers 500 (scripted by the test), once, in
the first process only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import acode
from acode.domain.events import EventType
from acode.engine.journal import verify_history
from acode.engine.observer import ApprovalRequest, StepNotice, StepPhase
from acode.engine.session import Session, journal_of
from acode.engine.steps.chat_step import ChatStep
from acode.engine.steps.commit_step import CommitStep
from acode.engine.steps.file_steps import EditStep, ReadStep, WriteStep
from acode.engine.steps.model_step import ModelStep
from acode.engine.steps.python_step import PythonStep, python_step
from acode.engine.steps.run_step import RunStep
from acode.security.signing import load_signer
from acode.store.base import EventStore, open_store
from acode.store.records import Commit
from acode.store.sqlite.store import SqliteStore
from acode.system.model_client import build_chat_payload, request_hash
from acode.system.process import CommandResult
from acode.system.workspace import StatePaths

__all__ = [
    "FAULTS",
    "Fault",
    "Injector",
    "Outcome",
    "make_workspace",
    "open_program",
    "run_program",
    "verified_state",
    "write_config",
]

Outcome = list[Any]  # [step, "ok", value] or [step, "error", message]

# The program's steps in order, each with the points of its life its kind reaches.
_HOOKS = ("execute", "value", "started")
_DURABLE = ("prepare", "start-record", "blob-record")
_EVERY = ("completion-record", "failure-record")
STEPS: dict[str, tuple[str, ...]] = {
    # A read just run hands back the text it read (Outcome.value): its value hook is a
    # replay's alone.
    "r1": ("execute", "started", "blob-record", *_EVERY),
    "w1": (*_HOOKS, *_DURABLE, *_EVERY),
    "e1": (*_HOOKS, *_DURABLE, *_EVERY),
    "x1": (*_HOOKS, *_DURABLE, *_EVERY),  # a run step declaring its paths
    "x2": (*_HOOKS, *_EVERY),  # an idempotent run step
    "p1": ("function", *_EVERY),  # a retryable python step: the shortest path
    "p2": ("function", "value", "started", "start-record", *_EVERY),  # not retryable
    "m1": (*_HOOKS, *_EVERY),
    "c1": (*_HOOKS, *_EVERY),
    "a1": ("started", "approver", *_EVERY),
    "k1": (*_HOOKS, *_EVERY),
    "z1": ("function", *_EVERY),
}
# The environment's faults: a database that refuses a write, a model server that fails.
_ONCE = {
    "w1": ("start-record", "completion-record"),
    "x1": ("completion-record",),
    "p1": ("completion-record",),
    "m1": ("execute",),
    "c1": ("execute",),
    "a1": ("completion-record",),
    "k1": ("completion-record",),
}
# Where a step fails first, for the failure-record faults.
_FAILING = frozenset({"execute", "function", "approver"})
# The step of the program each action class is (runs and python steps: see _step_of).
_ACTIONS: dict[type, str] = {
    ReadStep: "r1",
    WriteStep: "w1",
    EditStep: "e1",
    ModelStep: "m1",
    ChatStep: "c1",
    CommitStep: "k1",
}
_RECORDS = (
    ("start-record", EventType.STEP_STARTED.value),
    ("completion-record", EventType.STEP_COMPLETED.value),
    ("failure-record", EventType.STEP_FAILED.value),
)


@dataclass(frozen=True)
class Fault:
    step: str
    point: str
    once: bool = False  # the environment's fault, in the first process only

    @property
    def name(self) -> str:
        return f"{self.step}:{self.point}" + (":once" if self.once else "")

    @classmethod
    def parse(cls, text: str) -> Fault:
        step, point, *rest = text.split(":")
        return cls(step, point, rest == ["once"])


FAULTS: tuple[Fault, ...] = (
    *(Fault(step, point) for step, points in STEPS.items() for point in points),
    *(Fault(step, point, once=True) for step, points in _ONCE.items() for point in points),
)


class Injected(RuntimeError):
    """The fault a test put there."""


def _step_of(action: object) -> str:
    if isinstance(action, RunStep):
        return "x2" if action.idempotent else "x1"
    if isinstance(action, PythonStep):
        return action.fn.__name__  # the program names its functions after their steps
    return _ACTIONS[type(action)]


class Injector:
    """Puts one fault into this process, by patching classes until ``close``."""

    def __init__(self, fault: Fault | None, *, first_process: bool) -> None:
        self.fault = fault or Fault("-", "-")  # None: a run without fault
        self.armed = fault is not None and (first_process or not fault.once)
        self.fired = 0
        self._failure_write_failed = False
        # Called at each firing: the crash test notes when the fault happened.
        self.on_fire: Callable[[], None] | None = None
        self._undo: list[Callable[[], None]] = []
        if self.armed:
            self._install()

    def hits(self, step: str, point: str) -> bool:
        fault = self.fault
        if not self.armed or fault.step != step:
            return False
        if fault.point == "failure-record" and point in _FAILING:
            pass  # the step's own failure, every time
        elif fault.point != point:
            return False
        elif point == "failure-record":
            if self._failure_write_failed:
                return False  # once per process
            self._failure_write_failed = True
        elif fault.once and self.fired:
            return False
        self.fired += 1
        if self.on_fire is not None:
            self.on_fire()
        return True

    def check(self, step: str, point: str) -> None:
        if self.hits(step, point):
            raise Injected(f"injected fault at {point} of {step}")

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _patch(self, owner: type, name: str, make: Callable[[Any], Any]) -> None:
        """Give ``owner`` its own ``name``, wrapping the one it has (perhaps inherited)."""
        own = owner.__dict__.get(name)
        setattr(owner, name, make(getattr(owner, name)))
        if own is None:
            self._undo.append(lambda: delattr(owner, name))
        else:
            self._undo.append(lambda: setattr(owner, name, own))

    def _install(self) -> None:
        for cls in (*_ACTIONS, RunStep):
            self._patch(cls, "prepare", self._hook("prepare"))
            self._patch(cls, "execute", self._hook("execute"))
        for cls in (*_ACTIONS, RunStep, PythonStep):
            self._patch(cls, "value", self._value)
        self._patch(SqliteStore, "commit", self._commit)
        self._patch(SqliteStore, "append_completion", self._append)

    def _hook(self, hook: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def patched(action: Any, env: Any, *args: Any) -> Any:
                step = env.ctx.step_id
                if self.fault.once:
                    # The model server's fault (scripted by the test) is met in the call.
                    self.hits(step, hook)
                else:
                    self.check(step, hook)
                return original(action, env, *args)

            return patched

        return make

    def _value(self, original: Any) -> Any:
        def patched(action: Any, store: Any, result: Any) -> Any:
            self.check(_step_of(action), "value")
            return original(action, store, result)

        return patched

    def _commit(self, original: Any) -> Any:
        def patched(store: SqliteStore, sid: int, commit: Commit) -> Any:
            events = [(e.type.value, e.payload) for e in commit.events]
            return self._write(
                store, events, bool(commit.blobs), lambda: original(store, sid, commit)
            )

        return patched

    def _append(self, original: Any) -> Any:
        def patched(store: SqliteStore, sid: int, seq: int, *fields: Any) -> Any:
            _, _, payload_json, _, _ = fields
            events = [("step_completed", json.loads(payload_json))]
            return self._write(store, events, False, lambda: original(store, sid, seq, *fields))

        return patched

    def _write(
        self,
        store: SqliteStore,
        events: list[tuple[str, dict[str, Any]]],
        blobs: bool,
        write: Callable[[], Any],
    ) -> Any:
        steps = {str(p["step"]) for _, p in events if "step" in p}
        if blobs:
            for step in steps:
                self.check(step, "blob-record")
        for point, event_type in _RECORDS:
            for step in {str(p["step"]) for t, p in events if t == event_type}:
                if not self.fault.once:
                    self.check(step, point)
                elif self.hits(step, point):
                    # The database itself refuses the write: a real SQLITE_READONLY.
                    store.conn.execute("PRAGMA query_only = ON")
                    try:
                        return write()
                    finally:
                        store.conn.execute("PRAGMA query_only = OFF")
        return write()


class _Observer:
    """Raises when told that the faulty step starts."""

    def __init__(self, injector: Injector) -> None:
        self.injector = injector

    def on_step(self, notice: StepNotice) -> None:
        if notice.phase is StepPhase.STARTED:
            self.injector.check(notice.step_id, "started")


def make_workspace(path: Path) -> Path:
    """A git repository with the files the program reads and changes."""
    (path / "src").mkdir(parents=True)
    (path / "src" / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    (path / "log.txt").write_text("", encoding="utf-8")
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "start")):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


def write_config(workspace: Path, model_url: str, durability: str = "full") -> None:
    """``durability`` normal: for runs in which no process dies, nor the machine."""
    agent = workspace / ".agent"
    agent.mkdir(exist_ok=True)
    (agent / "config.yml").write_text(
        f"durability: {durability}\n"
        f"model:\n  base_url: {model_url}\n  name: fake-model\n  retries: 0\n",
        encoding="utf-8",
    )


def _normal(step: str, value: Any) -> Any:
    """What an outcome is compared by: no durations, no commit ids."""
    if isinstance(value, CommandResult):
        value = value.to_json()
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "duration_ms"}
    if step == "k1":
        return "<commit>" if isinstance(value, str) and len(value) == 40 else value
    return value


def run_program(session: Session, injector: Injector, workspace: Path) -> list[Outcome]:
    """Every step of the program, each call's error caught: the outcomes in order."""
    s = session
    outcomes: list[Outcome] = []

    def attempt(step: str, call: Callable[[], Any]) -> None:
        try:
            value = call()
        except Exception as exc:
            message = str(getattr(exc, "message", None) or exc)
            outcomes.append([step, "error", message.replace(str(workspace), "<ws>")])
        else:
            outcomes.append([step, "ok", _normal(step, value)])

    def fn(step: str, result: Any) -> Callable[[acode.StepContext], Any]:
        def function(ctx: acode.StepContext) -> Any:
            injector.check(step, "function")
            return result

        function.__name__ = step
        return function

    request = build_chat_payload(s.config.model, [{"role": "user", "content": "Name a colour."}])
    attempt("r1", lambda: s.read("r1", "src/a.txt"))
    attempt("w1", lambda: s.write("w1", "out/w.txt", "written\n"))
    attempt("e1", lambda: s.edit("e1", "src/a.txt", "alpha", "ALPHA"))
    attempt("x1", lambda: s.run("x1", "echo x1 >> log.txt", paths=["log.txt"]))
    attempt("x2", lambda: s.run("x2", "cat src/a.txt", idempotent=True))
    attempt("p1", lambda: s.step("p1", fn("p1", {"n": 1})))
    attempt("p2", lambda: s.step("p2", python_step(retryable=False)(fn("p2", [2]))))
    attempt("m1", lambda: s.model("m1", "Say hello."))
    attempt("c1", lambda: s.chat("c1", request, request_hash(request)))
    attempt("a1", lambda: s.approve("a1", "Go on?"))
    attempt("k1", lambda: s.commit("k1", "Save the work"))
    # What the edit left, read by the caller, returned by a step: replayed, not re-read.
    text = (workspace / "src" / "a.txt").read_text(encoding="utf-8")
    attempt("z1", lambda: s.step("z1", fn("z1", text)))
    return outcomes


def open_program(workspace: Path, injector: Injector, resume: str | None) -> Session:
    """The program's session, new or resumed (verified), with what the fault needs."""

    def approve(request: ApprovalRequest) -> bool:
        injector.check(request.step_id, "approver")
        return True

    observer = _Observer(injector) if injector.fault.point == "started" else None
    if resume is None:
        return acode.open_session(
            "Faults", workspace=workspace, observer=observer, approver=approve
        )
    return acode.resume_session(resume, workspace, observer=observer, approver=approve, verify=True)


def verified_state(workspace: Path, session_id: str) -> str:
    """The session's state, after its whole history was replayed and checked."""
    store = open_store(StatePaths(workspace).db)
    try:
        return verify_history(store, store.session(session_id), load_signer()).state.value
    finally:
        store.close()


def _count_instants(store: EventStore, limit: int | None, counter: list[int]) -> None:
    """Count the instants a kill can land at, and SIGKILL this process at the
    ``limit``-th: every SQL statement the session's store starts, every file renamed
    into place, every process started."""
    assert isinstance(store, SqliteStore)

    def tick(*_: object) -> None:
        counter[0] += 1
        if limit is not None and counter[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)

    store.conn.set_trace_callback(tick)

    def audit(name: str, _: tuple[Any, ...]) -> None:
        if name in ("os.rename", "os.replace", "subprocess.Popen"):
            tick()

    sys.addaudithook(audit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.step_faults")
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--fault", type=Fault.parse, default=None, help="none: no fault")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--kill-at", type=int, default=None)
    args = parser.parse_args(argv)
    injector = Injector(args.fault, first_process=args.resume is None)
    counter = [0]
    fired_at: list[int] = []
    injector.on_fire = lambda: fired_at.append(counter[0])
    with open_program(args.workspace, injector, args.resume) as session:
        _count_instants(journal_of(session).store, args.kill_at, counter)
        outcomes = run_program(session, injector, args.workspace)
        instants = counter[0]  # a kill lands before the session completes, or not at all
    result = {
        "session": session.id,
        "outcomes": outcomes,
        "state": verified_state(args.workspace, session.id),
        "fired_at": fired_at[0] if fired_at else None,
        "instants": instants,
    }
    args.results.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
