"""The thread that pushes a running session's hand-off ref and its steps' snapshots
(and any other session's left behind in the workspace) while the session runs.

A recorded step, or a run step's snapshot taken before its command starts, wakes it
(``wake.set()``: the only cost on the step path); records within a second of a push
wait for the next one. After a failure it waits out the back-off, and steps do not
wake it early. The session never waits for it, except at its end: one last push,
bounded by ``close(grace)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from acode.domain.backoff import Backoff
from acode.system.handoff_push import Pushed, push_refs, refs_to_push
from acode.system.snapshot_push import joined, push_snapshots, snapshots_to_push
from acode.system.workspace import StatePaths

__all__ = ["HandoffPusher"]

# One attempt while the session runs; a remote that takes longer is tried again later.
PUSH_TIMEOUT_SECONDS = 30.0
# Records closer together than this share one push: a push costs a few processes
# (git, pack-objects, the remote's receive-pack), a step of quick writes far less.
MIN_INTERVAL_SECONDS = 1.0


class HandoffPusher:
    def __init__(
        self,
        *,
        workspace: Path,
        remote: str,
        report: Callable[[Pushed], None],
        backoff: Backoff | None = None,
        timeout: float = PUSH_TIMEOUT_SECONDS,
        min_interval: float = MIN_INTERVAL_SECONDS,
        may_push: Callable[[], bool] | None = None,
    ) -> None:
        """``may_push``: asked before each push; False pushes nothing (the session's
        lease is another process's now) and ends the pushing."""
        self.wake = threading.Event()
        self._workspace = workspace
        self._paths = StatePaths(workspace)
        self._remote = remote
        self._report = report
        self._backoff = backoff or Backoff()
        self._timeout = timeout
        self._min_interval = min_interval
        self._may_push = may_push
        self._last_attempt = float("-inf")
        self._retry_at = 0.0
        self._final_timeout = timeout
        self._closing = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acode-handoff", daemon=True)

    def start(self) -> None:
        self.wake.set()  # what an earlier process left unpushed goes first
        self._thread.start()

    def close(self, grace: float) -> bool:
        """One last push of what is left, waiting at most ``grace`` seconds; True when
        it finished in time. What is left then waits for the next command."""
        self._final_timeout = grace
        self._closing.set()
        self.wake.set()
        return self._done.wait(grace + 0.5)

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                backing_off = self._retry_at - time.monotonic()
                if backing_off > 0:
                    if not self._closing.wait(backing_off):
                        self.wake.set()  # the retry is due, whether or not a step woke it
                    continue
                self.wake.wait()
                if self._closing.is_set():
                    break
                self.wake.clear()
                pause = self._last_attempt + self._min_interval - time.monotonic()
                if pause > 0 and self._closing.wait(pause):
                    break
                self._attempt(self._timeout)
            self._attempt(self._final_timeout)
        finally:
            self._done.set()

    def _attempt(self, timeout: float) -> None:
        self._last_attempt = time.monotonic()
        if self._may_push is not None and not self._may_push():
            self._closing.set()
            return
        try:
            pending = refs_to_push(self._workspace, self._paths)
            pushed = push_refs(
                self._workspace,
                self._paths,
                self._remote,
                pending,
                timeout=timeout,
                backoff=self._backoff,
            )
            if pushed.retry_at_us is None:  # the remote answered: the snapshots follow
                pushed = joined(pushed, self._push_snapshots(timeout))
        except Exception as exc:  # a bug here must not end the thread unnoticed
            later = time.time_ns() // 1000 + int(self._backoff.cap * 1_000_000)
            pushed = Pushed((), f"internal error: {type(exc).__name__}: {exc}", later)
        failing = self._retry_at > 0
        if pushed.retry_at_us is None:
            self._retry_at = 0.0
        else:
            # When the push record says, so that `acode status` tells the truth.
            delay = (pushed.retry_at_us - time.time_ns() // 1000) / 1e6
            self._retry_at = time.monotonic() + max(delay, self._backoff.first)
        # A failure is told once, not at every retry; a push that worked, every time.
        if pushed.session_ids or (pushed.reason is not None and not failing):
            self._report(pushed)

    def _push_snapshots(self, timeout: float) -> Pushed:
        """The snapshots of the steps, which another machine rolls a step left running
        back to (acode.system.snapshot_push)."""
        pending = snapshots_to_push(self._workspace, self._paths)
        return push_snapshots(
            self._workspace,
            self._paths,
            self._remote,
            pending,
            timeout=timeout,
            backoff=self._backoff,
        )
