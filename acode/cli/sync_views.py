"""How sync looks: the status section, `acode sync`'s report, the remote listing and the
one-line notices of a running session. Rendering only; nothing here talks to a remote."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from acode.cli.console import ago, cells, count, emit_json, err_console, iso, out_console
from acode.security.redaction import redact

if TYPE_CHECKING:
    from acode.store.records import SessionRow
    from acode.sync.notices import SyncNotice
    from acode.sync.remote import LeaseHolder, RemoteSession
    from acode.sync.service import SyncReport
    from acode.sync.status import SyncStatus

__all__ = [
    "DEGRADED_NOTE",
    "notice_json",
    "notice_text",
    "print_remote_sessions",
    "print_sync_report",
    "status_sync_json",
    "status_sync_lines",
    "store_json",
    "store_lines",
    "sync_report_json",
    "sync_summary",
]

DEGRADED_NOTE = "Note: Session continues locally. Sync will resume when remote is available."
LOCAL_ONLY = "local only (no remote configured)"


def _now_us() -> int:
    return time.time_ns() // 1000


def _iso(us: int | None) -> str | None:
    return iso(us) if us is not None else None


def _within(us: int, now_us: int) -> str:
    seconds = max(0, (us - now_us) // 1_000_000)
    if seconds >= 120:
        return f"in {seconds // 60}m"
    return f"in {seconds}s" if seconds else "now"


def sync_summary(status: SyncStatus | None) -> str:
    """The sync state in a few words, for `status` and the resume preview."""
    if status is None:
        return LOCAL_ONLY
    events = count(status.pending, "event")
    match status.mode.value:
        case "up_to_date":
            return "Up to date ✓"
        case "degraded":
            return f"DEGRADED - {events} pending"
        case _:
            return f"{events} pending"


def status_sync_lines(status: SyncStatus | None, running: bool) -> list[str]:
    """The `Sync:` section of `acode status`. ``running``: a process holds the session
    (its worker retries by itself)."""
    lines = [f"Sync:    {sync_summary(status)}"]
    if status is None:
        return lines
    now = _now_us()
    lines.append(f"Remote:  {status.remote}")
    if status.mode.value == "degraded":
        if status.last_attempt is not None:
            lines.append(f"  Last sync attempt: {ago(status.last_attempt, now)}")
        if running and status.next_retry is not None:
            lines.append(f"  Next retry: {_within(status.next_retry, now)}")
        else:
            lines.append("  Next retry: with the next `acode sync`, `run` or `resume`")
        lines.append(f"  Reason: {redact(status.reason or 'unknown')}")
        lines += ["", DEGRADED_NOTE]
    elif status.mode.value == "pending" and not running:
        lines.append("  Push them now with: acode sync")
    elif status.last_success is not None:
        lines.append(f"  Last sync: {ago(status.last_success, now)}")
    return lines


def status_sync_json(status: SyncStatus | None, *, in_store: bool = False) -> dict[str, Any]:
    """``in_store``: the sessions are in a PostgreSQL store, which needs no sync."""
    if status is None:
        return {"status": "in_store" if in_store else "local", "remote": None}
    return {
        "status": status.mode.value,
        "remote": status.remote,
        "pending": status.pending,
        "synced_seq": status.synced_seq,
        "last_attempt": _iso(status.last_attempt),
        "last_success": _iso(status.last_success),
        "next_retry": _iso(status.next_retry),
        "reason": redact(status.reason) if status.reason else None,
        "failures": status.failures,
        "down_since": _iso(status.down_since),
    }


POSTGRESQL = "postgresql://"  # how the PostgreSQL store's location starts (no password)


def store_lines(location: str, workspace: str) -> list[str]:
    """Where a session in a PostgreSQL store is kept, in place of the `Sync:` section:
    there is no mirror to sync with (store.url and sync.remote exclude each other)."""
    return [
        f"Store:   {location} (PostgreSQL, workspace {workspace})",
        "Sync:    none needed: every step commits to the store",
    ]


def store_json(location: str, workspace: str) -> dict[str, Any]:
    """``location``: the SQLite file, or the PostgreSQL store's URL without a password."""
    kind = "postgresql" if location.startswith(POSTGRESQL) else "sqlite"
    return {"kind": kind, "location": location, "workspace": workspace}


def _report_json(report: SyncReport, short: dict[str, str]) -> dict[str, Any]:
    return {
        "remote": report.remote,
        "status": "up_to_date" if report.reason is None else "degraded",
        "pushed": report.pushed,
        "pending": report.pending,
        "reason": redact(report.reason) if report.reason else None,
        "attempts": report.attempts,
        "sessions": [
            {
                "id": s.session_id,
                "short_id": short.get(s.session_id, s.session_id[:8]),
                "pushed": s.pushed,
                "pending": s.pending,
            }
            for s in report.sessions
        ],
    }


def sync_report_json(report: SyncReport, short: dict[str, str]) -> dict[str, Any]:
    return _report_json(report, short)


def print_sync_report(report: SyncReport, short: dict[str, str], as_json: bool) -> None:
    if as_json:
        emit_json(_report_json(report, short))
        return
    pushed = [s for s in report.sessions if s.pushed]
    if report.reason is None:
        text = (
            f"Pushed {count(report.pushed, 'event')} of {count(len(pushed), 'session')} "
            f"to {report.remote}."
            if pushed
            else f"Nothing to push: {report.remote} has every event."
        )
        out_console().print(f"{text}\nSync: Up to date ✓", markup=False)
        return
    waiting = [s for s in report.sessions if s.pending]
    lines = [
        f"Sync: DEGRADED - {count(report.pending, 'event')} pending "
        f"({count(len(waiting), 'session')}) for {report.remote}",
        f"  Reason: {redact(report.reason)}",
    ]
    if report.pushed:
        lines.append(f"  Pushed before that: {count(report.pushed, 'event')}")
    lines.append(
        "Note: Sessions continue locally; the events are kept. "
        "`acode sync --wait` retries until the remote answers."
    )
    err_console().print("\n".join(lines), markup=False)


def _holder_json(holder: LeaseHolder | None) -> dict[str, Any] | None:
    if holder is None:
        return None
    return {
        "host": holder.host,
        "pid": holder.pid,
        "since": holder.since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "expires": holder.expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def print_remote_sessions(
    found: list[RemoteSession],
    local: list[SessionRow],
    remote: str,
    as_json: bool,
    pruned: frozenset[str] = frozenset(),
) -> None:
    """Every session on the remote, and the local ones it lacks, most recent first;
    ``pruned``: the ids of the sessions pruned here (the remote keeps them)."""
    from acode.domain.ids import abbreviations

    here = {r.id: r for r in local}
    there = {s.id: s for s in found}
    short = abbreviations([*here, *there])
    latest = {i: max(r.updated_at for r in (here.get(i), there.get(i)) if r) for i in short}
    order = sorted(short, key=lambda i: (latest[i], i), reverse=True)
    listing = []
    for i in order:
        r = there.get(i) or here[i]
        on_remote = there.get(i)
        listing.append(
            {
                "id": i,
                "short_id": short[i],
                "state": r.state,
                "title": redact(r.title),
                "workspace": r.workspace,
                "host": on_remote.host if on_remote else None,
                "created_at": iso(r.created_at),
                "updated_at": iso(latest[i]),
                "where": _where(i, here, on_remote is not None, pruned),
                "lease": _holder_json(on_remote.holder if on_remote else None),
            }
        )
    if as_json:
        emit_json(listing)
        return
    _print_listing(listing, latest, remote)


_WHERE = {
    "both": "here + remote",
    "remote": "remote only",
    "pruned": "remote (pruned here)",
    "local": "here only",
}


def _where(
    session_id: str, here: dict[str, SessionRow], on_remote: bool, pruned: frozenset[str]
) -> str:
    if not on_remote:
        return "local"
    if session_id in here:
        return "both"
    return "pruned" if session_id in pruned else "remote"


def _print_listing(listing: list[dict[str, Any]], updated: dict[str, int], remote: str) -> None:
    console = out_console()
    if not listing:
        console.print(f"No sessions on {remote} or here yet.", markup=False)
        return
    from rich.table import Table

    now = _now_us()
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("ID", "STATE", "UPDATED", "WHERE", "HOST", "HELD BY"):
        table.add_column(name, no_wrap=True)
    table.add_column("TITLE", overflow="ellipsis", ratio=1)
    for item in listing:
        lease = item["lease"]
        table.add_row(
            *cells(
                item["short_id"],
                item["state"],
                ago(updated[item["id"]], now),
                _WHERE[item["where"]],
                item["host"] or "-",
                f"pid {lease['pid']} on {lease['host']}" if lease else "-",
                item["title"],
            )
        )
    console.print(f"Sessions on {remote} and here:", markup=False)
    console.print(table)


def _away(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = int(seconds)
    return f" after {whole // 60}m{whole % 60:02d}s" if whole >= 60 else f" after {whole}s"


def notice_text(notice: SyncNotice) -> str:
    """One line a running session prints when its sync changes."""
    match notice.kind.value:
        case "degraded":
            return (
                f"Sync: DEGRADED - {notice.remote} unavailable ({redact(notice.reason or '')}); "
                f"{count(notice.pending, 'event')} pending. The session continues locally."
            )
        case "reconnected":
            return (
                f"Sync: {notice.remote} is back{_away(notice.away_seconds)}; "
                f"{count(notice.pushed, 'event')} pushed."
            )
        case "lease_taken_over":
            return (
                f"Sync: took the lease over from {notice.holder}, a process of this machine "
                "that is no longer running."
            )
        case _:
            return (
                f"Sync: the remote names another holder of this session ({notice.holder}); "
                "it may be running elsewhere too."
            )


def notice_json(notice: SyncNotice) -> dict[str, Any]:
    record: dict[str, Any] = {"event": "sync", "status": notice.kind.value}
    for key in ("reason", "pending", "pushed", "away_seconds", "holder", "epoch"):
        value = getattr(notice, key)
        if value:
            record[key] = redact(value) if isinstance(value, str) else value
    record["remote"] = notice.remote
    return record
