"""Opening sessions: the workspace's state directory, the store, the lock, the journal."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import ExitStack, suppress
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from acode.domain.config import (
    AcodeConfig,
    FleetSettings,
    HandoffSettings,
    LogSettings,
    RetentionSettings,
    StoreSettings,
    SyncSettings,
    config_hash,
    config_to_dict,
)
from acode.domain.events import EventType, canonical_json
from acode.domain.ids import uuid7
from acode.domain.states import SessionState, is_terminal
from acode.engine.config import load_config
from acode.engine.store_choice import configured_store_url, workspace_identity
from acode.errors import ConfigError, SessionNotFoundError, StorageError
from acode.security.signing import load_signer
from acode.store.base import EventStore, open_store, workspace_url
from acode.system.clock import Clock, SystemClock
from acode.system.log import set_log_limits
from acode.system.private_dirs import check_state_dir
from acode.system.workspace import StatePaths, ensure_state_ignored

# What only starting a session or taking its lock needs is loaded there: the commands
# that only read sessions, and the dry run of resume, open the workspace alone.
if TYPE_CHECKING:
    from acode.domain.plan import Plan
    from acode.engine.handoff import Handoff
    from acode.engine.interrupts import Interrupts
    from acode.engine.leases import StoreLease
    from acode.engine.observer import Approver, Observer
    from acode.engine.session import Session
    from acode.system.locks import SessionLock

__all__ = [
    "Workspace",
    "existing_workspace",
    "now_iso",
    "open_handoff",
    "open_session",
    "open_workspace",
    "open_workspace_store",
    "refuse_mirror_of_postgres",
    "session_config",
    "start_session",
    "store_identity",
    "take_lock",
    "take_lock_and_lease",
]


class Workspace(NamedTuple):
    """An opened workspace: its root, its state paths and its settings."""

    root: Path
    paths: StatePaths
    config: AcodeConfig


def open_workspace(workspace: Path | str = ".", config: AcodeConfig | None = None) -> Workspace:
    """The workspace at ``workspace`` with its state directory ready and config loaded."""
    root = Path(workspace).resolve()
    paths = StatePaths(root)
    cfg = config if config is not None else load_config(root)
    refuse_mirror_of_postgres(cfg)
    paths.check_database()
    with suppress(FileExistsError):  # a link or a file there: refused below
        paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_state_dir(paths.state_dir)
    ensure_state_ignored(paths.state_dir)
    set_log_limits(paths, cfg.log)
    return Workspace(root=root, paths=paths, config=cfg)


def existing_workspace(workspace: Path | str = ".", config: AcodeConfig | None = None) -> Workspace:
    """The workspace, for commands that act on recorded sessions: where none was ever
    recorded, say so rather than create acode's state there."""
    root = Path(workspace).resolve()
    url = config.store.url if config is not None else configured_store_url(root)
    if url is None and not StatePaths(root).db.exists():
        raise SessionNotFoundError(
            f"no acode sessions in {root}",
            hint="run the command in the workspace of the session, or pass --workspace DIR",
        )
    return open_workspace(root, config)


def open_workspace_store(ws: Workspace) -> EventStore:
    """The store of the workspace's sessions: its SQLite file, or the PostgreSQL database
    of ``store.url``, where it sees its own sessions alone (as in a file of its own)."""
    url = ws.config.store.url
    if url is None:
        return open_store(ws.paths.db, ws.config.durability)
    return open_store(workspace_url(url, store_identity(ws)), ws.config.durability)


def store_identity(ws: Workspace) -> str:
    """What the workspace's sessions record as their workspace: its identity in a
    shared store (``store.workspace``), else its absolute path."""
    if ws.config.store.url is None:
        return str(ws.root)
    return workspace_identity(ws.root, ws.config.store)


def refuse_mirror_of_postgres(config: AcodeConfig) -> None:
    """ConfigError when both store.url and sync.remote are set (`acode doctor` says it too)."""
    # The mirror pushes the events of the SQLite file (acode/sync); with the sessions in
    # PostgreSQL there is nothing there to push, and they are on a server already.
    if config.store.url is not None and config.sync.remote is not None:
        raise ConfigError(
            "store.url and sync.remote are both set: the sessions are stored in PostgreSQL, "
            "and the remote mirror copies only a SQLite store's",
            hint="unset sync.remote (or ACODE_SYNC_DSN) to keep the sessions in PostgreSQL, "
            "or store.url (or ACODE_STORE_URL) to keep them in .agent/state/acode.db with "
            "the mirror",
        )


def session_config(config: AcodeConfig) -> AcodeConfig:
    """The configuration as a session records it and resume compares it: where the
    workspace stores and mirrors its sessions, and the queue its workers take them from,
    are not part of what a session does (and their URLs may hold a password), so they are
    left out, as are the size of the log, where its work tree is pushed and how long ended
    sessions stay."""
    return replace(
        config,
        sync=SyncSettings(),
        store=StoreSettings(),
        fleet=FleetSettings(),
        log=LogSettings(),
        handoff=HandoffSettings(),
        retention=RetentionSettings(),
    )


def now_iso(clock: Clock) -> str:
    return datetime.fromtimestamp(clock.now_us() / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def take_lock(
    ws: Workspace, session_id: str, clock: Clock, *, label: str | None = None
) -> SessionLock:
    from acode.system.locks import acquire

    return acquire(
        ws.paths.locks,
        session_id,
        command=" ".join(sys.argv) or "python",
        now_iso=now_iso(clock),
        label=label,
    )


def take_lock_and_lease(
    ws: Workspace,
    store: EventStore,
    session_id: str,
    clock: Clock,
    cleanup: ExitStack,
    *,
    label: str | None = None,
) -> tuple[SessionLock, StoreLease | None]:
    """The session's lock file and, with a PostgreSQL store, its lease there (SQLite's
    store is one machine's: the lock file is its lease); both released by ``cleanup``
    unless the caller takes them over. SessionLockedError (exit 16) when another process
    holds either."""
    from acode.engine.leases import hold_session

    lock = take_lock(ws, session_id, clock, label=label)
    cleanup.callback(lock.release)
    lease = hold_session(
        store, ws.paths, session_id, label or session_id[:8], ws.config.fleet.lease_seconds
    )
    if lease is not None:
        cleanup.callback(lease.release)
    return lock, lease


def open_session(
    title: str,
    workspace: Path | str = ".",
    config: AcodeConfig | None = None,
    *,
    observer: Observer | None = None,
    approver: Approver | None = None,
) -> Session:
    """Start a new session in ``workspace`` and hold its lock until it is closed.

    ``config`` replaces the workspace's .agent/config.yml; ``observer`` hears of each step,
    ``approver`` answers approval steps (docs/library.md). The library's way in: acode's
    own commands start theirs with :func:`start_session`, which also records a plan, an
    agent's task or a mode."""
    return start_session(title, workspace, config, observer=observer, approver=approver)


def start_session(
    title: str,
    workspace: Path | str = ".",
    config: AcodeConfig | None = None,
    *,
    plan: Plan | None = None,
    plan_file: Path | None = None,
    agent_task: str | None = None,
    overrides: Mapping[str, object] | None = None,
    ledger: str | None = None,
    parent_id: str | None = None,
    observer: Observer | None = None,
    approver: Approver | None = None,
    interrupts: Interrupts | None = None,
    clock: Clock | None = None,
    mode: str | None = None,
    mode_chosen: bool = False,
) -> Session:
    """:func:`open_session` with what acode's commands (the plan runner, the agent, work
    sessions) record besides.

    ``agent_task`` makes it an agent session (`acode run "task"`), which records the
    task and the ``overrides`` (``{"section.key": value}``, from command-line flags)
    that were applied to ``config``, so that resume applies them again. ``plan_file``,
    the file ``plan`` was read from, is recorded to name it when the session is over. ``ledger``
    ("work" or "tasks") makes it a session that later commands append to
    (``acode.work.ledger``). ``mode`` is the resume mode it runs in (`acode run --mode`,
    ``mode_chosen`` when given there rather than taken by default): its resume defaults to
    a chosen one."""
    # Loaded here, not with this module: the commands that only read sessions and the
    # previews of resume need the workspace helpers above, not the step engine.
    from acode.engine.journal import new_session_journal
    from acode.engine.session import Session
    from acode.engine.sync_link import open_sync_link

    clock = clock or SystemClock()
    ws = open_workspace(workspace, config)
    signer = load_signer()
    session_id = uuid7(clock.now_us() // 1000, clock.random_bytes(10))
    kind = ledger or _kind(plan, agent_task)
    with ExitStack() as cleanup:
        store = open_workspace_store(ws)
        cleanup.callback(store.close)
        lock, lease = take_lock_and_lease(ws, store, session_id, clock, cleanup)
        _tidy_staging(ws.paths, store)
        journal = new_session_journal(
            store,
            session_id=session_id,
            title=title,
            workspace=store_identity(ws),
            kind=kind,
            config_json=canonical_json(config_to_dict(session_config(ws.config))),
            config_hash=config_hash(session_config(ws.config)),
            parent_id=parent_id,
            entries=_first_events(
                title,
                ws,
                kind,
                plan,
                plan_file,
                parent_id,
                agent_task,
                overrides,
                (mode, mode_chosen),
            ),
            clock=clock,
            signer=signer,
        )
        cleanup.pop_all()  # the Session owns the store, the lock and the lease from here on
    return Session(
        journal=journal,
        workspace=ws.root,
        config=ws.config,
        lock=lock,
        lease=lease,
        signer=signer,
        observer=observer,
        approver=approver,
        interrupts=interrupts,
        sync=open_sync_link(ws.paths, ws.config.sync.remote, session_id),
        handoff=open_handoff(ws, session_id),
    )


def open_handoff(ws: Workspace, session_id: str) -> Handoff | None:
    """The session's hand-off; None, with nothing of it imported, when it is off."""
    if not ws.config.handoff.remote:
        return None
    from acode.engine.handoff import Handoff

    return Handoff(ws.root, ws.config.handoff, session_id)


def _tidy_staging(paths: StatePaths, store: EventStore) -> None:
    """Remove the empty staging folders of sessions that have ended (versions before 21
    left one behind, and so does a process killed between the end and the removal).
    A session that may resume keeps its folder: what it staged is evidence for the
    rollback of its interrupted step."""
    try:
        names = os.listdir(paths.state_dir / "tmp")
    except OSError:  # none yet
        return
    for name in names:
        folder = paths.temp_dir(name)
        try:
            with os.scandir(folder) as entries:
                if next(entries, None) is not None:
                    continue
            row = store.session(name)
        except (OSError, StorageError):  # not a folder, or not a session of this workspace
            continue
        if row.archived or is_terminal(SessionState(row.state)):
            with suppress(OSError):  # filled since, or gone: either way not ours to remove
                os.rmdir(folder)


def _kind(plan: Plan | None, agent_task: str | None) -> str:
    if agent_task is not None:
        return "agent"
    return "plan" if plan is not None else "library"


def _first_events(
    title: str,
    ws: Workspace,
    kind: str,
    plan: Plan | None,
    plan_file: Path | None,
    parent_id: str | None,
    agent_task: str | None,
    overrides: Mapping[str, object] | None,
    mode: tuple[str | None, bool],
) -> list[tuple[EventType, dict[str, object]]]:
    created: dict[str, object] = {
        "title": title,
        "workspace": str(ws.root),
        "config_hash": config_hash(session_config(ws.config)),
        "kind": kind,  # on the chain: the sessions row's copy is checked against it
        "v": 1,
    }
    if parent_id:
        created["parent_id"] = parent_id
    if plan_file is not None:
        created["plan_file"] = str(plan_file.resolve())
    if agent_task is not None:
        created["task"] = agent_task
        created["overrides"] = dict(overrides or {})
    if mode[0] is not None:
        created["mode"], created["mode_chosen"] = mode
    entries: list[tuple[EventType, dict[str, object]]] = [(EventType.SESSION_CREATED, created)]
    if plan is not None:
        entries.append(
            (
                EventType.PLAN_RECORDED,
                {"plan": plan.to_dict(), "total_steps": len(plan.steps()), "v": 1},
            )
        )
    entries.append(
        (
            EventType.STATE_CHANGED,
            {
                "from": SessionState.CREATED.value,
                "to": SessionState.EXECUTING.value,
                "reason": "started",
            },
        )
    )
    return entries
