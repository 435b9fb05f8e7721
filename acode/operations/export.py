"""``acode session export``: one session as its progress file, or complete as JSON.

The JSON export holds everything the database knows about the session except what
only acode may use: checkpoint signatures are left out, and every text is redacted
(invariant 7, docs/invariants.md), so an export can be attached to a bug report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from acode.domain.events import Event
from acode.domain.reducer import SessionSummary, fold_all
from acode.engine.catalog import recorded_plan
from acode.engine.progress_file import iso_time, render_progress
from acode.errors import UsageError
from acode.security.redaction import redact_json
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.workspace import AGENT_DIR

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportFormat",
    "check_export_target",
    "export_session",
    "in_state_dir",
    "write_export",
]

EXPORT_FORMAT = "acode-export"
EXPORT_VERSION = 1
ExportFormat = Literal["md", "json"]


def export_session(store: EventStore, row: SessionRow, fmt: ExportFormat) -> str:
    """The session as markdown (the progress file) or as a complete, redacted JSON document."""
    if fmt not in ("md", "json"):
        raise UsageError(f"unknown export format {fmt!r}", hint="use --format md or --format json")
    events = store.events(row)
    # Folded from the first event rather than read from a checkpoint: an export must
    # show the state the history really leads to.
    summary = fold_all(events)
    now_us = time.time_ns() // 1000
    if fmt == "md":
        return render_progress(store, row, summary, now_us=now_us)
    document = _document(store, row, summary, events, now_us)
    return json.dumps(redact_json(document), indent=2, ensure_ascii=False) + "\n"


def _document(
    store: EventStore,
    row: SessionRow,
    summary: SessionSummary,
    events: Sequence[Event],
    now_us: int,
) -> dict[str, Any]:
    plan = recorded_plan(store, row)
    return {
        "format": EXPORT_FORMAT,
        "v": EXPORT_VERSION,
        "exported_at": iso_time(now_us, precise=True),
        "session": _session(store, row),
        "summary": summary.to_dict(),
        "plan": plan.to_dict() if plan else None,
        "events": [
            {
                "seq": e.seq,
                "event_id": e.event_id,
                "ts": iso_time(e.ts_us, precise=True),
                "type": e.type.value,
                "payload": e.payload,
            }
            for e in events
        ],
        "steps": [
            {
                "position": s.position,
                "step_id": s.step_id,
                "task_id": s.task_id,
                "kind": s.kind,
                "status": s.status.value,
                "attempt": s.attempt,
                "input_hash": s.input_hash,
                "event_seq": s.event_seq,
            }
            for s in store.steps(row.sid)
        ],
        "messages": [
            {"idx": m.idx, "role": m.role, "content": _json_or_text(m.content), "seq": m.seq}
            for m in store.messages(row.sid)
        ],
        "files": [
            {"path": f.path, "sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
            for f in store.files(row.sid)
        ],
        "checkpoints": [
            {
                "id": c.id,
                "seq": c.seq,
                "created_at": iso_time(c.created_at, precise=True),
                "head": c.head.hex(),
            }
            for c in store.checkpoints(row)
        ],
    }


def _session(store: EventStore, row: SessionRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "short_id": row.short_id or store.short_id(row.id),
        "title": row.title,
        "state": row.state,
        "workspace": row.workspace,
        "parent_id": row.parent_id,
        "kind": row.kind,
        "config": _json_or_text(row.config),
        "config_hash": row.config_hash,
        "created_at": iso_time(row.created_at, precise=True),
        "updated_at": iso_time(row.updated_at, precise=True),
        "current_task": row.current_task,
        "current_step": row.current_step,
        "archived": row.archived,
    }


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def in_state_dir(path: Path) -> bool:
    """Whether ``path`` (resolved) is inside any workspace's ``.agent/state``."""
    return any(pair == (AGENT_DIR, "state") for pair in pairwise(path.parts))


def check_export_target(output: Path, *, force: bool) -> Path:
    """The file an export named ``output`` goes to, symlinks resolved. Refuses a path
    inside any workspace's ``.agent/state`` (an export there could replace the database
    or a lock, whatever ``--force`` says), a directory, and an existing file unless
    ``force``. Checked before the export is made, and again as it is written."""
    try:
        target = output.resolve()
        exists = target.exists()
        is_dir = target.is_dir()
    except OSError as exc:  # a name too long, a loop of symlinks
        raise _refused(output, exc.strerror or str(exc)) from exc
    if in_state_dir(target):
        raise _refused(
            output,
            f"it is inside acode's state directory ({target}), where it could replace the "
            "database; write the export anywhere else",
        )
    if is_dir:
        raise _refused(output, "it is a directory; name a file in it")
    if exists and not force:
        raise UsageError(
            f"--output {output}: the file exists",
            hint="give --force to replace it, or name another file",
        )
    return target


def write_export(output: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``output`` atomically, after ``check_export_target``."""
    from acode.system.files import atomic_write

    target = check_export_target(output, force=force)
    try:
        atomic_write(target, text.encode("utf-8"))
    except OSError as exc:
        raise _refused(output, f"it cannot be written: {exc.strerror or exc}") from exc


def _refused(output: Path, problem: str) -> UsageError:
    return UsageError(
        f"--output {output}: {problem}",
        hint="name a file outside .agent/state in a directory you may write to",
    )
