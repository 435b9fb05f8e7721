"""run: a shell command in the workspace, with a time-out and bounded output.

A non-idempotent command records a snapshot of the files it declares (``paths``)
before it starts, so an interrupted run can be rolled back and run again; a
``check`` command that exits 0 tells resume the effect is already there. A command
that declares no paths, in a git work tree, gets a snapshot of the whole work tree
instead: a private commit under ``refs/acode/`` (see :mod:`acode.system.snapshot`), to which
its rollback reverts what the command changed, and not what a person changed since
(see :mod:`acode.engine.rollback`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from acode.domain.kinds import StepKind
from acode.engine.rollback import AsLeft, describe, roll_back
from acode.engine.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv
from acode.engine.steps.file_steps import observe, read_file, restore_image
from acode.errors import StepFailedError
from acode.system.beneath import Beneath
from acode.system.files import expand_globs, sha256_bytes
from acode.system.orphans import NotedCommand, commands_started
from acode.system.process import CommandResult, run_command
from acode.system.snapshot import BACKUP_SUFFIX, snapshot_if_work_tree, snapshot_ref
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = ["RunStep"]


@dataclass(frozen=True)
class RunStep:
    command: str
    idempotent: bool = False
    timeout: float | None = None
    paths: tuple[str, ...] = ()
    check: str | None = None
    kind: StepKind = StepKind.RUN
    waits: ClassVar[bool] = False

    @property
    def durable_start(self) -> bool:
        return not self.idempotent

    def input(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "idempotent": self.idempotent,
            "paths": list(self.paths),
            "check": self.check,
        }

    def prepare(self, env: StepEnv) -> Prepared:
        ctx = env.ctx
        ghost = None
        if not self.paths:
            ref = snapshot_ref(ctx.session_id, ctx.step_id, ctx.attempt)
            ghost = snapshot_if_work_tree(ctx.workspace, ref)
        if ghost is not None:
            return Prepared({"command": self.command, "snapshot": {}, "ghost": ghost})
        snapshot: dict[str, str | None] = {}
        blobs: list[tuple[str, bytes]] = []
        with Beneath(ctx.workspace) as tree:
            for rel in tree.each(expand_globs(tree, self.paths)):
                found = read_file(tree, rel)
                if found is None:
                    snapshot[rel] = None
                    continue
                sha = sha256_bytes(found[0])
                blobs.append((sha, found[0]))
                snapshot[rel] = sha
        return Prepared(record={"command": self.command, "snapshot": snapshot}, blobs=tuple(blobs))

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        timeout = self.timeout or env.config.run.default_timeout_seconds
        paths = StatePaths(env.ctx.workspace)
        name = f"{env.ctx.step_id}-{env.ctx.attempt}"
        with NotedCommand(paths, env.ctx.session_id, name, self.command) as noted:
            result = run_command(
                noted.command,
                cwd=env.ctx.workspace,
                timeout=timeout,
                max_output=env.config.run.max_output_bytes,
                env=_step_env(env),
            )
        if result.timed_out:
            raise StepFailedError(
                f"`{self.command}` timed out after {timeout:g} s",
                hint="raise the step's timeout or fix the command",
            )
        if result.exit_code != 0:
            tail = (result.stderr or result.stdout).strip()[-500:]
            raise StepFailedError(
                f"`{self.command}` exited with status {result.exit_code}"
                + (f":\n{tail}" if tail else "")
            )
        with Beneath(env.ctx.workspace) as tree:
            files = tuple(observe(tree, rel) for rel in tree.each(expand_globs(tree, self.paths)))
        return Outcome(result.to_json(), files=files)

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        if self.check:
            probe = run_command(self.check, cwd=env.ctx.workspace, timeout=60, env=_step_env(env))
            if probe.exit_code == 0:
                return Recovery(
                    action=RecoveryAction.ALREADY_DONE,
                    detail=f"check `{self.check}` passed: the command's effect is already there",
                    result={"check": self.check, "exit_code": 0, "recovered": True},
                )
        snapshot: dict[str, str | None] = started.get("snapshot") or {}
        ghost: str | None = started.get("ghost")
        if env.strategy == "retry" or not (snapshot or ghost):
            return Recovery(action=RecoveryAction.RETRY, detail=f"running `{self.command}` again")
        if ghost:
            return self._restore_ghost(env, ghost, AsLeft.of(started))
        restored = []
        with Beneath(env.ctx.workspace) as tree:
            for rel in tree.each(sorted(snapshot)):
                sha = snapshot[rel]
                if tree.sha256(rel) != sha:
                    restore_image(env, tree, rel, sha)
                    restored.append(rel)
        return Recovery(
            action=RecoveryAction.ROLLBACK_AND_RETRY,
            detail=f"restored {len(restored)} of {len(snapshot)} declared files, running again",
            restored=tuple(restored),
        )

    def _restore_ghost(self, env: StepEnv, ghost: str, as_left: AsLeft | None) -> Recovery:
        """Revert what the step changed since its snapshot, never what a person changed
        since the pause (``as_left``), nor what changed after the resume began."""
        ctx = env.ctx
        # After a kill, a person's change cannot be told from the step's: whatever the
        # rollback reverts is kept first, so that nothing is lost for good.
        backup = snapshot_ref(ctx.session_id, ctx.step_id, ctx.attempt) + BACKUP_SUFFIX
        done = roll_back(
            ctx.workspace,
            ghost,
            backup_ref=backup,
            as_left=as_left,
            fresh_after_ns=env.fresh_after_ns,
        )
        return Recovery(
            action=RecoveryAction.ROLLBACK_AND_RETRY,
            detail=describe(done, ghost, backup),
            restored=done.paths,
        )

    def value(self, store: EventStore, result: Any) -> CommandResult | dict[str, Any]:
        if "stdout" in result:
            return CommandResult.from_json(result)
        return dict(result)


def _step_env(env: StepEnv) -> dict[str, str]:
    """What a step's command gets besides the caller's environment (run_command leaves
    acode's secrets out of that)."""
    return {
        # also how resume recognises an orphan
        **commands_started(StatePaths(env.ctx.workspace), env.ctx.session_id),
        "ACODE_STEP_ID": env.ctx.step_id,
        "ACODE_IDEMPOTENCY_KEY": env.ctx.idempotency_key,
    }
