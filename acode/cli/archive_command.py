"""`acode session archive` and `acode session import`: parse, call, render."""

from __future__ import annotations

from pathlib import Path

from acode.cli.console import emit_json, out_console

__all__ = ["session_archive", "session_import"]


def session_archive(
    workspace: Path, session_id: str, output: Path, *, force: bool, as_json: bool
) -> None:
    from acode.operations.archive import archive_session

    done = archive_session(workspace, session_id, output, force=force)
    row = done.row
    if as_json:
        emit_json(
            {
                "id": row.id,
                "state": row.state,
                "file": str(done.path),
                "bytes": done.size,
                "counts": done.counts,
            }
        )
        return
    c = done.counts
    out_console().print(
        f"Archived session {row.short_id} ({row.state}, {c['events']} events, "
        f"{c['blobs']} file images) to {output} ({_size(done.size)}). It holds what the "
        f"database holds, unredacted: keep it as private as .agent/state. "
        f"Bring it back with: acode session import {output}",
        markup=False,
    )


def session_import(workspace: Path, archive: Path, *, as_json: bool) -> None:
    from acode.operations.archive_import import import_archive

    done = import_archive(workspace, archive)
    row = done.row
    if as_json:
        emit_json(
            {
                "id": row.id,
                "state": row.state,
                "imported": done.new,
                "file": str(archive),
                "counts": done.counts,
            }
        )
        return
    if not done.new:
        text = (
            f"Session {row.short_id} ({row.title}) is here already, identical to {archive}; "
            "nothing was imported."
        )
    else:
        text = (
            f"Imported session {row.short_id} ({row.title}, {row.state}, "
            f"{done.counts.get('events', 0)} events), verified, from {archive}."
        )
    out_console().print(f"{text} See it with: acode session show {row.short_id}", markup=False)


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} bytes"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"
