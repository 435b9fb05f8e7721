"""Finding sessions: by id or unique prefix, and the resumable ones."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from acode.domain.config import AcodeConfig, config_dict_hash, parse_config, with_overrides
from acode.domain.events import Event, EventType
from acode.domain.reducer import SessionSummary, payload_digest
from acode.domain.states import SessionState, is_resumable
from acode.engine.history import History
from acode.errors import (
    AmbiguousSessionError,
    CheckpointError,
    ErrorCode,
    SessionNotFoundError,
    UsageError,
)
from acode.store.base import EventStore
from acode.store.records import SessionRow

if TYPE_CHECKING:
    from acode.domain.plan import Plan
    from acode.domain.usage import Usage

__all__ = [
    "LEDGER_KINDS",
    "PLAN_EVENT_SEQ",
    "AgentRecord",
    "current_config",
    "find_session",
    "is_resumable_row",
    "model_usage",
    "recorded_agent",
    "recorded_config",
    "recorded_mode",
    "recorded_plan",
    "resumable_sessions",
]

PLAN_EVENT_SEQ = 2  # a plan session's events start: session_created, plan_recorded

_PREFIX = re.compile(r"[0-9a-f-]{1,36}")


def find_session(store: EventStore, id_or_prefix: str) -> SessionRow:
    prefix = id_or_prefix.strip().lower()
    if not _PREFIX.fullmatch(prefix):
        raise UsageError(
            f"{id_or_prefix!r} is not a session id",
            hint="session ids are hexadecimal; `acode session list` shows them",
        )
    matches = store.sessions_with_prefix(prefix)
    if not matches:
        pruned = store.pruned_with_prefix(prefix)
        if len(pruned) == 1:
            from acode.engine.pruned import pruned_error

            raise pruned_error(pruned[0])
        raise SessionNotFoundError(
            f"no session with id {id_or_prefix!r} in {store.location}",
            hint="`acode session list` shows the sessions of this workspace",
        )
    if len(matches) > 1:
        shown = ", ".join(m.short_id for m in matches[:10])
        raise AmbiguousSessionError(
            f"{id_or_prefix!r} matches {len(matches) if len(matches) <= 10 else 'more than 10'} "
            f"sessions: {shown}",
            hint="give more characters of the id",
        )
    return matches[0]


# Sessions that later commands append to (acode.work.ledger): never "resumed".
LEDGER_KINDS = frozenset({"work", "tasks"})


def resumable_sessions(store: EventStore) -> list[SessionRow]:
    """Sessions that `acode resume` may continue, most recently updated first."""
    return [row for row in store.sessions() if is_resumable_row(row)]


def is_resumable_row(row: SessionRow) -> bool:
    return (
        not row.archived and row.kind not in LEDGER_KINDS and is_resumable(SessionState(row.state))
    )


# Where a recorded start is read from: a session's History, which authenticates each
# event it reads (what a resume relies on), or the store as it is (what a view shows).
Source = EventStore | History


def _event(source: Source, row: SessionRow, seq: int) -> Event:
    return source.event(seq) if isinstance(source, History) else source.event(row, seq)


def recorded_plan(
    source: Source, row: SessionRow, summary: SessionSummary | None = None
) -> Plan | None:
    """The plan a plan session recorded as its second event (see lifecycle). Given the
    verified ``summary``, the plan must be the one its signed checkpoints name: a plan
    edited in the database is refused rather than run."""
    if row.kind != "plan":
        return None
    event = _event(source, row, PLAN_EVENT_SEQ)
    if event.type is not EventType.PLAN_RECORDED:
        raise CheckpointError(
            f"session {row.short_id}: event {PLAN_EVENT_SEQ} should record its plan, "
            f"but is {event.type.value}",
            code=ErrorCode.CHAIN_BROKEN,
        )
    if summary is not None and summary.plan_hash != payload_digest(event.payload_json):
        raise CheckpointError(
            f"session {row.short_id}: its recorded plan (event {PLAN_EVENT_SEQ}) is not the "
            "plan its signed checkpoints name: it was edited",
            hint="refusing to run it; the history is kept unchanged for inspection",
            code=ErrorCode.CHAIN_BROKEN,
        )
    from acode.domain.plan import Plan  # plan sessions only

    if summary is None:
        return Plan.from_dict(event.payload["plan"])
    return Plan.from_record(event.payload["plan"])


def recorded_config(row: SessionRow, history: History | None = None) -> AcodeConfig:
    """The configuration the session started with: resume restores it. With the
    session's ``history``, it must be the one whose hash its first event recorded."""
    recorded = json.loads(row.config)
    config = parse_config(recorded, f"recorded config of session {row.short_id}")
    if history is not None and history.event(1).payload.get("config_hash") != config_dict_hash(
        recorded
    ):
        raise CheckpointError(
            f"session {row.short_id}: its recorded configuration is not the one it started "
            "with: the database was edited",
            hint="refusing to run with it; the history is kept unchanged for inspection",
            code=ErrorCode.CHAIN_BROKEN,
        )
    return config


class AgentRecord(NamedTuple):
    """What `acode run "task"` recorded when it started an agent session."""

    task: str
    overrides: Mapping[str, object]


def recorded_agent(source: Source, row: SessionRow) -> AgentRecord | None:
    """The task and flag overrides of an agent session; None for other kinds."""
    if row.kind != "agent":
        return None
    created = _event(source, row, 1).payload  # session_created
    overrides = created.get("overrides")
    return AgentRecord(
        task=str(created.get("task", row.title)),
        overrides=dict(overrides) if isinstance(overrides, dict) else {},
    )


def recorded_mode(source: Source, row: SessionRow) -> str | None:
    """The mode chosen with `acode run --mode` when the session started, which its resume
    defaults to; None when it ran in the default mode of its terminal (recorded too, but
    not a choice to hold a later resume to) or started before modes were recorded."""
    created = _event(source, row, 1).payload  # session_created
    mode = created.get("mode")
    return mode if isinstance(mode, str) and created.get("mode_chosen") is True else None


def current_config(source: Source, row: SessionRow, workspace_config: AcodeConfig) -> AcodeConfig:
    """The configuration the session would run with now: the workspace's, with the
    overrides its command line recorded applied again."""
    agent = recorded_agent(source, row)
    if agent is None or not agent.overrides:
        return workspace_config
    return with_overrides(
        workspace_config, agent.overrides, f"recorded flags of session {row.short_id}"
    )


def model_usage(store: EventStore, row: SessionRow) -> Usage:
    """Tokens and cost of the session's answered model calls, across all its runs."""
    from acode.domain.usage import total_usage

    return total_usage(store.model_results(row))
