"""commit: a git commit of the workspace carrying ``Acode-Step: <idempotency key>``.

The trailer is what makes a commit step safe to run again: before committing, the
history is searched for a commit of this step (any attempt), so an interrupted
commit step never commits twice and needs no start record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from acode.domain.idempotency import step_prefix
from acode.domain.kinds import StepKind
from acode.engine.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv
from acode.errors import StepFailedError
from acode.system.git import (
    clear_stale_index_lock,
    commit_all,
    find_commit_with_trailer,
    is_work_tree,
)
from acode.system.orphans import commands_started
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = ["TRAILER", "CommitStep"]

TRAILER = "Acode-Step"


@dataclass(frozen=True)
class CommitStep:
    message: str
    kind: StepKind = StepKind.COMMIT
    durable_start: bool = False
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"message": self.message}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        ws = env.ctx.workspace
        try:
            return self._commit(env, ws)
        except StepFailedError:
            # Asked only when git failed: a commit step costs a git process less. Outside
            # a work tree, the search finds nothing and the next git call fails first.
            if not is_work_tree(ws):
                raise StepFailedError(
                    f"cannot commit: {ws} is not a git work tree",
                    hint="run `git init` in the workspace, or remove the commit step",
                ) from None
            raise

    def _commit(self, env: StepEnv, ws: Path) -> Outcome:
        prefix = step_prefix(env.ctx.session_id, env.ctx.step_id)
        existing = find_commit_with_trailer(ws, TRAILER, prefix)
        if existing is not None:
            return Outcome({"sha": existing, "reused": True})
        clear_stale_index_lock(ws)
        sha = commit_all(
            ws,
            self.message,
            {TRAILER: env.ctx.idempotency_key},
            extra_env=commands_started(StatePaths(ws), env.ctx.session_id),
        )
        return Outcome({"sha": sha, "reused": False})

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        return Recovery(action=RecoveryAction.RETRY, detail="commits are found by their trailer")

    def value(self, store: EventStore, result: Any) -> str:
        return str(result["sha"])
