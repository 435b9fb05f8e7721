"""`acode worker`: claim items of a queue, run each session in a scratch clone, push its
result as a branch, and mark the item done or failed.

Each session runs in a child process, `acode run` or `acode resume` itself with
``--json``: the same code as a person's run, a crash of one session never takes the
worker or another session with it, and each session has its own SQLite and lock. The
children are forked by the worker's launcher (acode/cli/launcher.py, a fork server with
acode already imported), which spares each the start of an interpreter and its imports.
The worker's threads only wait: one per slot (``concurrency``) for its child, and one
that renews the leases of every item held, in one statement, with the worker's
heartbeat.

Fencing: every write to an item names the epoch of the claim. A worker that finds its
epoch stale, or that could not renew a lease before it lapsed by its own clock, kills
that session's process group at once and writes and pushes nothing more for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.errors import (
    EnvironmentValidationError,
    FleetError,
    SessionLockedError,
    TerminalStateError,
)
from acode.fleet.queue import LeaseLost, Queue, QueueItem
from acode.fleet.reclaim import Action, Decision, decide_claim, out_of_reach, store_workspace
from acode.fleet.repo import clone, mask_url, push_result
from acode.fleet.session_env import launcher_env, session_env
from acode.fleet.store_leases import StoreLeases

if TYPE_CHECKING:
    from acode.system.fork_server import ForkServer, Spawned

__all__ = ["LAUNCHER", "Report", "Worker", "WorkerOptions"]

Report = Callable[[dict[str, Any]], None]
# Steps that may act outside the workspace: a fresh clone does not undo them.
_OUTSIDE_KINDS = frozenset({"run", "python"})
# No one to ask: an approval stops the session; `--` before the plan or task, which may
# start with "-".
_CHILD_FLAGS = ("--json", "--mode", "autopilot", "--")
# A resume refused because the session is held (exit 16) is tried again after this many
# seconds, doubled each time up to the second figure, while the item's lease is ours.
_LOCKED_RETRY = (0.25, 2.0)
# A resume that cannot bring the session's work tree into a fresh clone, or check it.
_REFUSED_HERE = EnvironmentValidationError.exit_code
# An idle slot wakes this long after the soonest lease of a running item lapses, to claim
# it then rather than at its next poll.
_AFTER_LAPSE = 0.05
# The launcher's command line (acode/cli/launcher.py). ``-P``: no directory of the worker's
# or of a session's clone goes before acode's own on the module path.
LAUNCHER = (sys.executable, "-P", "-c", "from acode.cli.launcher import main; main()")


@dataclass(frozen=True)
class WorkerOptions:
    url: str
    home: Path  # scratch workspaces go under home/.agent/fleet/
    queue: str = "default"
    concurrency: int = 1
    lease_seconds: float = 30.0
    once: bool = False  # exit once the queue has nothing queued or running
    # The sessions' PostgreSQL store (``store.url``), which every worker shares: a session
    # a dead worker left on another machine is resumed in a fresh clone here. None: each
    # clone's SQLite file.
    store_url: str | None = None


@dataclass
class _Held:
    """An item this worker runs: its claim, its child, whether its lease is gone."""

    item: QueueItem
    valid_until: float  # monotonic: the lease lapses then unless renewed
    proc: Spawned | None = None
    lost: threading.Event = field(default_factory=threading.Event)

    def lose(self) -> None:
        self.lost.set()
        if self.proc is not None and self.proc.poll() is None:
            from acode.system.process_table import kill_tree

            # The session's step commands run in process groups of their own: the tree,
            # not the group, is what must stop writing (a `sleep` left running once
            # outlived a cancelled item).
            with contextlib.suppress(PermissionError):
                kill_tree(self.proc.pid)


class Worker:
    def __init__(self, options: WorkerOptions, report: Report) -> None:
        self.options = options
        self.id = uuid.uuid4().hex[:12]
        self.host = socket.gethostname()
        guard = threading.Lock()

        def serialized(event: dict[str, Any]) -> None:  # one line at a time, from any thread
            with guard:
                report(event)

        self._report = serialized
        self._stopping = threading.Event()
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self._launch: ForkServer | None = None

    # -- the whole run ------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (SIGTERM, SIGINT) or, with ``once``, until the queue is
        empty; returns 0. A queue that cannot be reached at the start is an error."""
        opts = self.options
        queue = Queue(opts.url, application="acode worker")
        queue.register(self.id, opts.queue, opts.concurrency)
        self._report(
            {
                "event": "worker",
                "id": self.id,
                "host": self.host,
                "pid": os.getpid(),
                "queue": opts.queue,
                "concurrency": opts.concurrency,
            }
        )
        # Its imports done while the worker waits, not on the way of the first session
        # (an idle worker taking over a dead one's session among them).
        self._launcher().start()
        previous = {
            sig: signal.signal(sig, lambda *_: self.stop())
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        renewer = threading.Thread(target=self._renew_loop, args=(queue,), daemon=True)
        renewer.start()
        threading.Thread(target=self._fence_loop, daemon=True).start()
        slots = [
            threading.Thread(target=self._slot, name=f"slot-{n}", daemon=True)
            for n in range(opts.concurrency)
        ]
        try:
            for slot in slots:
                slot.start()
            while any(slot.is_alive() for slot in slots):
                for slot in slots:
                    slot.join(0.2)  # a timed join lets the signal handlers run
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._stopping.set()
            renewer.join(self.options.lease_seconds)
            with contextlib.suppress(FleetError):
                queue.heartbeat(self.id, 0, stopped=True)
            queue.close()
            if self._launch is not None:
                self._launch.close()
        self._report({"event": "stopped", "id": self.id})
        return 0

    def stop(self) -> None:
        """Claim nothing more; each running session is asked to pause (SIGTERM, as a
        person's Ctrl+C), and its item is given back when it has."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._lock:
            held = list(self._held.values())
        for h in held:
            if h.proc is not None and h.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(h.proc.pid, signal.SIGTERM)

    def _write(self, held: _Held, write: Callable[[], None]) -> None:
        """A fenced write to the item, tried again while the queue cannot be reached and
        the lease has not lapsed by this worker's clock; then the item is lost."""
        told = False
        while True:
            if held.lost.is_set():
                raise LeaseLost(f"queue item {held.item.id}")
            try:
                write()
                return
            except FleetError as exc:
                if not told:  # once, not twice a second while the network is out
                    self._report({"event": "queue_unreachable", "reason": exc.message})
                    told = True
            held.lost.wait(0.5)

    # -- slots ----------------------------------------------------------------------

    def _slot(self) -> None:
        opts = self.options
        queue = Queue(opts.url, application="acode worker")
        poll = min(1.0, opts.lease_seconds / 4)
        try:
            while not self._stopping.is_set():
                try:
                    item = queue.claim(opts.queue, self.id, opts.lease_seconds)
                    if item is None and opts.once and queue.pending(opts.queue) == 0:
                        return
                except FleetError as exc:
                    self._report({"event": "queue_unreachable", "reason": exc.message})
                    item = None
                if item is None:
                    self._stopping.wait(self._idle_wait(queue, poll))
                    continue
                self._work(queue, item)
        finally:
            queue.close()

    def _idle_wait(self, queue: Queue, poll: float) -> float:
        """How long an idle slot waits: until its next poll, or until just after the
        soonest lease of a running item lapses (a dead worker's item is taken then, not up
        to a poll later)."""
        try:
            lapse = queue.soonest_lapse(self.options.queue)
        except FleetError:
            return poll
        return poll if lapse is None else min(poll, max(lapse, 0.0) + _AFTER_LAPSE)

    def _work(self, queue: Queue, item: QueueItem) -> None:
        held = _Held(item, time.monotonic() + self.options.lease_seconds * 0.9)
        with self._lock:
            self._held[item.id] = held
        self._beat(queue)
        try:
            self._run_item(queue, held)
        except LeaseLost:
            held.lose()
            self._report({"event": "lost", "item": item.id, "epoch": item.epoch})
        finally:
            with self._lock:
                del self._held[item.id]
            self._beat(queue)

    def _beat(self, queue: Queue) -> None:
        """The heartbeat with the count of items running, at once (`acode worker
        status`); the renewals repeat it. One missed is no matter."""
        with self._lock:
            running = len(self._held)
        with contextlib.suppress(FleetError):
            queue.heartbeat(self.id, running)

    def _run_item(self, queue: Queue, held: _Held) -> None:
        item = held.item
        decision = decide_claim(item, self.host, shared_store=self.options.store_url is not None)
        self._report(
            {
                "event": "claimed",
                "item": item.id,
                "epoch": item.epoch,
                "attempt": item.attempts,
                "action": decision.action.value,
                "repo": mask_url(item.repo_url),
            }
        )
        self._go_on(queue, held, decision)

    def _go_on(self, queue: Queue, held: _Held, decision: Decision) -> None:
        item = held.item
        if decision.action is Action.FAIL:
            self._finish(queue, held, None, decision.reason)
            return
        if decision.action is Action.RESTART:
            self._write(held, lambda: queue.restart(item))
            self._report({"event": "restart", "item": item.id, "reason": decision.reason})
        scratch = self.options.home / ".agent" / "fleet" / f"item-{item.id}"
        if decision.action is Action.RESUME and decision.workspace is not None:
            workspace = decision.workspace
            argv = ["resume", str(workspace), str(item.session_id)]
        else:
            workspace = scratch / "repo"
            try:
                target = self._prepare(item, scratch)
            except FleetError as exc:
                self._finish(queue, held, None, exc.message)
                return
            # A session resumed in a fresh clone (a shared store): `acode resume` finds
            # it in the store and its work tree by the hand-off ref.
            resumed = decision.action is Action.RESUME
            argv = ["resume" if resumed else "run", str(workspace)]
            argv.append(str(item.session_id) if resumed else target)
        code, final = self._run_session(queue, held, argv, workspace)
        if held.lost.is_set():
            raise LeaseLost(f"queue item {item.id}")
        if argv[0] == "resume" and decision.workspace is None and code == _REFUSED_HERE:
            # Its work tree cannot be brought into the fresh clone (its machine was lost
            # before it pushed it, or no step had changed a file yet): out of reach.
            why = f"cannot be resumed here: {self._log_tail(workspace.parent)}"
            self._go_on(queue, held, out_of_reach(item, why))
            return
        if argv[0] == "resume" and code == TerminalStateError.exit_code:
            # It ended before: its worker died between the end and the push.
            final = {"id": item.session_id, **self._ended(item, workspace)}
            code = 0 if final.get("state") == "COMPLETED" else 1
        session_id = final.get("id") or item.session_id
        # Paused (130), ended by the SIGTERM before it could pause (it had just started),
        # or still held by another process: either way resumable, as after a crash.
        if self._stopping.is_set() and (code in (130, SessionLockedError.exit_code) or code < 0):
            self._write(held, lambda: queue.release(item))
            self._report({"event": "released", "item": item.id, "session": session_id})
            return
        if code != 0 or str(final.get("state", "")).upper() != "COMPLETED" or not session_id:
            reason = str(final.get("message") or self._log_tail(workspace.parent))
            self._finish(queue, held, None, reason or f"the session ended with exit {code}")
            return
        # Still ours (and for a full lease more): only then push.
        self._write(held, lambda: queue.renew(item, self.options.lease_seconds))
        try:
            branch = push_result(workspace, item.repo_url, str(session_id))
        except FleetError as exc:
            self._finish(queue, held, None, exc.message)
            return
        self._finish(queue, held, branch, None)
        shutil.rmtree(workspace.parent, ignore_errors=True)

    def _run_session(
        self, queue: Queue, held: _Held, argv: list[str], workspace: Path
    ) -> tuple[int, dict[str, Any]]:
        """:meth:`_run_child`, run again while a resume is refused because another process
        holds the session (exit 16: its process still running, or, in a shared store, the
        lease of a holder on another machine that has not lapsed yet): not yet, rather than
        a failure. Each try is a fresh process, after a short back-off, while the item's
        lease is this worker's; the first refusal, and each new reason, is reported."""
        delay, most = _LOCKED_RETRY
        told = ""
        leases = StoreLeases(self.options.store_url)
        try:
            while True:
                code, final = self._run_child(queue, held, argv, workspace)
                locked = argv[0] == "resume" and code == SessionLockedError.exit_code
                if not locked or held.lost.is_set() or self._stopping.is_set():
                    return code, final
                reason = self._log_tail(workspace.parent)
                if reason != told:
                    told = reason
                    self._report(
                        {
                            "event": "waiting",
                            "item": held.item.id,
                            "session": held.item.session_id,
                            "reason": reason,
                        }
                    )
                delay = self._until_free(held, leases, argv[2], delay, most)
        finally:
            leases.close()

    def _until_free(
        self, held: _Held, leases: StoreLeases, session_id: str, delay: float, most: float
    ) -> float:
        """Wait before the next try of a refused resume; returns the next back-off. The
        session's lease in the store held on another machine (a lost machine's, which
        nothing gives back) is waited for until it lapses by the store's clock, read
        again at each back-off in case it is given back sooner, and the resume starts
        just after; a holder here (a live process: the lock file, or its lease) makes it
        wait one back-off. Woken early by a lost lease; a stop is seen at the next read,
        or by the next try's start."""
        while not held.lost.is_set() and not self._stopping.is_set():
            left = leases.elsewhere(session_id)
            if left is None:
                held.lost.wait(delay)
                return min(delay * 2, most)
            if left <= delay:
                held.lost.wait(left + _AFTER_LAPSE)
                return delay
            held.lost.wait(delay)
            delay = min(delay * 2, most)
        return delay

    def _prepare(self, item: QueueItem, scratch: Path) -> str:
        """A fresh clone in ``scratch``/repo; the plan beside it (not in the work tree,
        whose result becomes the branch). Returns what `acode run` is given."""
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True, mode=0o700)
        ignore = scratch.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n", encoding="utf-8")
        clone(item.repo_url, item.branch, scratch / "repo")
        if item.plan is None:
            return str(item.task)
        plan = scratch / "plan.yaml"
        plan.write_text(item.plan, encoding="utf-8")
        return str(plan)

    def _finish(self, queue: Queue, held: _Held, branch: str | None, error: str | None) -> None:
        self._write(held, lambda: queue.finish(held.item, branch=branch, error=error))
        event = {"event": "done", "item": held.item.id, "branch": branch}
        if error is not None:
            event = {"event": "failed", "item": held.item.id, "error": error}
        self._report(event)

    # -- the session's process --------------------------------------------------------

    def _run_child(
        self, queue: Queue, held: _Held, argv: list[str], workspace: Path
    ) -> tuple[int, dict[str, Any]]:
        """Run `acode COMMAND -w WORKSPACE --json --mode autopilot -- TARGET` (``argv``:
        command, workspace, target), recording on the item what it says (its session, a
        step acting outside); returns its exit status and its last report."""
        from acode.system.fork_server import ForkServerGone

        log = (workspace.parent / "session.log").open("ab")
        final: dict[str, Any] = {}
        outside = held.item.outside_effects
        read, write = os.pipe()
        out = os.fdopen(read, encoding="utf-8", errors="replace")
        # The start gate (acode.fleet.session_env.START_GATE): the session's standard input,
        # written once its id is on the item; closed unwritten, should this worker die.
        gate_read, gate_write = os.pipe()
        gate = os.fdopen(gate_write, "wb", buffering=0)
        try:
            try:
                held.proc = self._launcher().spawn(
                    [argv[0], "-w", argv[1], *_CHILD_FLAGS, argv[2]],
                    cwd=workspace,
                    env=self._session_env(held.item),
                    stdio=(gate_read, write, log.fileno()),
                )
            finally:
                os.close(gate_read)
                os.close(write)  # the child's copy is the only one: its end is our EOF
            if self._stopping.is_set():  # stopped while it started: pause it too
                os.killpg(held.proc.pid, signal.SIGTERM)
            for line in out:
                record = _json_line(line)
                if held.lost.is_set():
                    break
                if record.get("event") == "started" and record.get("id"):
                    final["id"] = str(record["id"])
                    self._write(
                        held, partial(queue.record_session, held.item, final["id"], str(workspace))
                    )
                    with contextlib.suppress(BrokenPipeError):  # it ended meanwhile
                        gate.write(b"go\n")
                    gate.close()
                elif (
                    record.get("event") == "step"
                    and record.get("phase") == "started"
                    and record.get("kind") in _OUTSIDE_KINDS
                    and not outside
                ):
                    self._write(held, lambda: queue.record_outside_effects(held.item))
                    outside = True
                elif record.get("event") == "session":
                    final.update(record)
            return held.proc.wait(), final
        except ForkServerGone as gone:
            # Its session got SIGTERM with it and paused, resumable: the item goes on
            # once its lease lapses, as after the death of a worker.
            self._launcher().check()
            raise LeaseLost(f"queue item {held.item.id}: {gone}") from gone
        except BaseException:
            held.lose()
            raise
        finally:
            log.close()
            out.close()
            with contextlib.suppress(BrokenPipeError):
                gate.close()
            if held.proc is not None and held.proc.poll() is None:
                with contextlib.suppress(ForkServerGone):
                    held.proc.wait()

    def _launcher(self) -> ForkServer:
        """The fork server the sessions start from (acode/cli/launcher.py), started with
        the first session and again should it die."""
        from acode.system.fork_server import ForkServer

        with self._lock:
            if self._launch is None:
                self._launch = ForkServer(
                    LAUNCHER,
                    launcher_env(self.options.store_url),
                    on_start=lambda pid: self._report({"event": "launcher", "pid": pid}),
                    on_death=lambda pid, code: self._report(
                        {"event": "launcher_died", "pid": pid, "status": code}
                    ),
                )
            return self._launch

    def _session_env(self, item: QueueItem) -> dict[str, str]:
        opts = self.options
        return session_env(store_workspace(item), opts.store_url, opts.lease_seconds)

    def _ended(self, item: QueueItem, workspace: Path) -> dict[str, Any]:
        """`acode status --json` of the item's session, which ended: its state, and why."""
        session_id = str(item.session_id)
        status = ["status", "-w", str(workspace), "--json", "--", session_id]
        shown = subprocess.run(
            [sys.executable, "-m", "acode", *status],
            env=self._session_env(item),
            capture_output=True,
            text=True,
            check=False,
        )
        state = str(_json_line(shown.stdout).get("state", ""))
        return {"state": state, "message": f"session {session_id} is {state or 'unreadable'}"}

    @staticmethod
    def _log_tail(scratch: Path) -> str:
        """Why the session's process ended, from its standard error: its last error
        with its hint, else its last line."""
        try:
            lines = (scratch / "session.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lines = [line.strip() for line in lines if line.strip()]
        errors = [n for n, line in enumerate(lines) if line.startswith("error ")]
        tail = " ".join(lines[errors[-1] :]) if errors else (lines[-1] if lines else "")
        return tail if len(tail) <= 500 else tail[:497] + "..."

    # -- leases -----------------------------------------------------------------------

    def _renew_loop(self, queue: Queue) -> None:
        """Every third of a lease: renew every lease held, and the heartbeat. An item
        missing from the renewed ones was taken over or cancelled: it is lost."""
        every = self.options.lease_seconds / 3
        while not self._stopping.wait(every) or self._busy():
            with self._lock:
                held = list(self._held.values())
            sent = time.monotonic()
            try:
                kept = queue.renew_all([h.item for h in held], self.options.lease_seconds)
                queue.heartbeat(self.id, len(held))
            except FleetError as exc:
                self._report({"event": "queue_unreachable", "reason": exc.message})
                continue
            for h in held:
                if h.item.id in kept:
                    # A tenth of the lease short of it: the lease the database counts from
                    # its own later now() never lapses before this worker stops the session.
                    h.valid_until = sent + self.options.lease_seconds * 0.9
                else:
                    h.lose()
            if self._stopping.is_set():
                time.sleep(min(every, 0.5))

    def _fence_loop(self) -> None:
        """Stop at once a session whose lease lapsed unrenewed by this worker's clock (the
        queue out of reach): another worker may take it from then on."""
        while True:
            with self._lock:
                held = list(self._held.values())
            now = time.monotonic()
            for h in held:
                if now >= h.valid_until and not h.lost.is_set():
                    h.lose()
            time.sleep(0.1)

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._held)


def _json_line(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
