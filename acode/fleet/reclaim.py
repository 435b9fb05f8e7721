"""What a worker does with an item it claimed: start its session, resume it, start it
over, or fail it. One decision, in one place, so that it changes in one place when the
session store is shared (PostgreSQL as the store, with the hand-off ref)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import NamedTuple

from acode.fleet.queue import QueueItem

__all__ = ["Action", "Decision", "decide_claim", "out_of_reach", "store_workspace"]


class Action(Enum):
    START = "start"  # a new session in a fresh clone
    RESUME = "resume"  # `acode resume` of the item's session, in ``workspace``
    RESTART = "restart"  # its session is out of reach and did nothing outside: start over
    FAIL = "fail"


class Decision(NamedTuple):
    action: Action
    workspace: Path | None = None  # RESUME: where the session's workspace is
    reason: str = ""  # RESTART, FAIL: why


def store_workspace(item: QueueItem) -> str:
    """The name the clones of ``item`` share in a shared session store (``store.workspace``):
    every worker that claims it, on any machine, sees its session under that name. One
    per item, not per repository: a clone lists the sessions of its own item alone."""
    return f"acode-fleet-item-{item.id}"


def decide_claim(item: QueueItem, host: str, *, shared_store: bool = False) -> Decision:
    """How ``item``, just claimed on ``host``, goes on from where its last claim left it.

    A session lives in the SQLite of the workspace its worker cloned: it can be resumed
    where that workspace is (this host, the folder still there), or elsewhere, in a fresh
    clone, once the store is shared (``shared_store``: PostgreSQL as the store and the
    hand-off ref ``refs/acode/sessions/<id>``, which give any worker its history and its
    work tree).
    Otherwise starting over is safe only when none of its steps acted outside the
    workspace (a ``run`` or ``python`` step started): the fresh clone undoes the rest."""
    if item.session_id is None:
        return Decision(Action.START)
    workspace = Path(item.session_workspace) if item.session_workspace else None
    if item.session_host == host and workspace is not None and workspace.is_dir():
        # Even with a shared store: nothing to clone or fetch, and a session stopped
        # before its work tree was first recorded goes on too.
        return Decision(Action.RESUME, workspace)
    if shared_store:
        return Decision(Action.RESUME)
    where = f"{item.session_workspace} on host {item.session_host}"
    return out_of_reach(
        item,
        f"was left in {where}, out of reach",
        "Resuming it on another machine needs a shared session store (docs/fleet.md)",
    )


def out_of_reach(item: QueueItem, why: str, more: str = "") -> Decision:
    """``item``'s session cannot go on here (``why``, after "session <id> "): it starts
    over in a fresh clone, which undoes the rest, when none of its steps acted outside its
    workspace (a ``run`` or ``python`` step started); otherwise the item fails rather than
    do that twice (``more``: what would have saved it)."""
    short = str(item.session_id)[:8]
    if not item.outside_effects:
        return Decision(
            Action.RESTART,
            reason=f"session {short} {why}; none of its steps acted outside its workspace, "
            "so it starts over",
        )
    return Decision(
        Action.FAIL,
        reason=f"session {short} {why}, after a run or python step that may have acted "
        "outside its workspace: starting over could do that twice" + (f". {more}" if more else ""),
    )
