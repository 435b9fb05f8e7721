"""`acode session prune`: which ended sessions go (or would go), which stay and why, and
the question before anything is removed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from acode.cli.console import ago, count, emit_json, err_console, iso, keyboard, out_console
from acode.domain.retention import PRUNE_STATES, parse_age
from acode.errors import UsageError
from acode.operations.prune import (
    PruneReport,
    PruneRequest,
    Selection,
    prune_sessions,
    select_sessions,
)

__all__ = ["run_prune"]


def run_prune(
    workspace: Path,
    *,
    older_than: str | None,
    states: list[str] | None,
    dry_run: bool,
    include_backups: bool,
    yes: bool,
    as_json: bool,
) -> int:
    """0 when done; 1 when the state stays over its retention limit."""
    request = PruneRequest(
        older_than_us=parse_age(older_than) if older_than is not None else None,
        states=_states(states),
    )
    selection = select_sessions(workspace, request)
    if dry_run:
        _print(selection, None, dry_run=True, as_json=as_json)
        return 1 if selection.over_limit else 0
    if not selection.removals:
        # Nothing new to remove, and nothing to ask: what an earlier prune, killed after
        # its commit, left of its sessions' files is removed all the same.
        report = prune_sessions(workspace, ())
        report = report._replace(selection=report.selection._replace(skipped=selection.skipped))
        _print(report.selection, report, dry_run=False, as_json=as_json)
        return 1 if _over(report) else 0
    if not yes and not sys.stdin.isatty():
        raise UsageError(
            "acode session prune removes sessions for good, and there is no terminal to ask on",
            hint="look first with --dry-run, then pass --yes to remove them",
        )
    if not yes:
        _print(selection, None, dry_run=True, as_json=False)
        if not _confirm(len(selection.removals)):
            err_console().print("Nothing was removed.")
            return 0
    report = prune_sessions(workspace, selection.ids, include_backups=include_backups)
    _print(report.selection, report, dry_run=False, as_json=as_json)
    return 1 if _over(report) else 0


def _states(given: list[str] | None) -> frozenset[str] | None:
    if not given:
        return None
    found = {s.strip().lower() for s in given}
    unknown = sorted(found - set(PRUNE_STATES))
    if unknown:
        raise UsageError(
            f"--state {unknown[0]!r} is not a state a prune removes",
            hint=f"give one of {', '.join(PRUNE_STATES)} (repeat --state for several); "
            "a session that may be resumed is never pruned",
        )
    return frozenset(found)


def _confirm(n: int) -> bool:
    from rich.prompt import Confirm

    return Confirm.ask(
        f"Remove {count(n, 'session')} for good?",
        default=False,
        console=err_console(),
        stream=keyboard(),
    )


def _over(report: PruneReport) -> bool:
    limit = report.selection.limit
    return limit is not None and report.state_bytes_after > limit


def _print(
    selection: Selection, report: PruneReport | None, *, dry_run: bool, as_json: bool
) -> None:
    if as_json:
        emit_json(_json(selection, report, dry_run))
        return
    from datetime import UTC, datetime

    console = out_console()
    now = int(datetime.now(UTC).timestamp() * 1_000_000)
    if report is not None and report.leftovers:
        console.print(
            f"Finished removing the files of {count(report.leftovers, 'session')} an "
            "earlier prune left.",
            markup=False,
        )
    if selection.removals:
        console.print("Would remove:" if dry_run else "Removed:", markup=False)
        console.print(_table(selection, now))
    else:
        console.print("Nothing to prune.", markup=False)
    if selection.skipped:
        console.print("Kept:", markup=False)
        for s in selection.skipped:
            console.print(f"  {s.short_id}  {s.state}: {s.reason}", markup=False)
    if selection.removals:
        events = sum(r.events for r in selection.removals)
        verb = "Would free" if dry_run else "Freed"
        images = (
            f", {count(selection.blobs, 'stored file image')} no other session uses"
            if selection.blobs
            else ""
        )
        console.print(
            f"{verb} about {selection.freed:,} bytes: "
            f"{count(len(selection.removals), 'session')}, {count(events, 'event')}{images}.",
            markup=False,
        )
    for line in _state_lines(selection, report):
        console.print(line, markup=False)


def _table(selection: Selection, now: int) -> Any:
    from rich.table import Table

    from acode.cli.console import cells

    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("SESSION", "STATE", "UPDATED", "EVENTS", "BYTES"):
        table.add_column(
            name, no_wrap=True, justify="right" if name in ("EVENTS", "BYTES") else "left"
        )
    for r in selection.removals:
        table.add_row(
            *cells(r.short_id, r.state, ago(r.updated_at, now), f"{r.events:,}", f"{r.bytes:,}")
        )
    return table


def _state_lines(selection: Selection, report: PruneReport | None) -> list[str]:
    lines = []
    if report is not None:
        if report.converted:
            lines.append(
                "The database was compacted once (VACUUM) so that later prunes give their "
                "space back as they go (incremental auto-vacuum)."
            )
        if report.vacuum_error is not None:
            lines.append(
                f"The space was not given back to the file system ({report.vacuum_error}): "
                "the prune stands; VACUUM needs free disk about the database's size."
            )
        lines.append(f"State now: {report.state_bytes_after:,} bytes.")
    limit = selection.limit
    if limit is not None:
        after = (
            report.state_bytes_after
            if report is not None
            else selection.state_bytes - selection.freed
        )
        if after > limit:
            lines.append(
                f"The state stays over retention.max_state_bytes ({limit:,} bytes): only "
                "sessions that may not be pruned are left (resumable, running, not synced "
                "yet, or in a family with one of those)."
            )
    return lines


def _json(selection: Selection, report: PruneReport | None, dry_run: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "dry_run": dry_run,
        "removed": [
            {
                "id": r.id,
                "short_id": r.short_id,
                "state": r.state,
                "updated_at": iso(r.updated_at),
                "events": r.events,
                "bytes": r.bytes,
            }
            for r in selection.removals
        ],
        "skipped": [
            {"id": s.id, "short_id": s.short_id, "state": s.state, "reason": s.reason}
            for s in selection.skipped
        ],
        "totals": {
            "sessions": len(selection.removals),
            "events": sum(r.events for r in selection.removals),
            "bytes": selection.freed,
            "blobs": selection.blobs,
            "blob_bytes": selection.blob_bytes,
        },
        "limit": selection.limit,
    }
    if report is None:
        data["state_bytes"] = selection.state_bytes
        data["over_limit"] = selection.over_limit
    else:
        data["state_bytes"] = report.state_bytes_after
        data["over_limit"] = _over(report)
        data["vacuum"] = {"converted": report.converted, "error": report.vacuum_error}
        data["leftovers"] = report.leftovers
    return data
