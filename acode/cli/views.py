"""How sessions, previews and histories look: Rich tables for people, dicts for --json."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from acode.cli.console import (
    ago,
    cells,
    console_width,
    count,
    emit_json,
    emit_text,
    iso,
    out_console,
    plain_output,
    plain_table,
    print_lines,
)
from acode.cli.handoff_views import arrival_lines, handoff_json, handoff_lines
from acode.cli.sync_views import (
    POSTGRESQL,
    status_sync_json,
    status_sync_lines,
    store_json,
    store_lines,
    sync_summary,
)
from acode.security.redaction import redact, redact_json

if TYPE_CHECKING:
    from rich.table import Table

    from acode.domain.events import Event
    from acode.domain.position import Position
    from acode.domain.reducer import SessionSummary, StepRecord
    from acode.domain.timing import WorkTime
    from acode.domain.usage import Usage
    from acode.engine.handoff import HandoffStatus
    from acode.resume.environment import ChangedFile, EnvironmentReport, RollbackPreview
    from acode.resume.service import ResumePreview
    from acode.store.leases import LeaseHolder
    from acode.store.records import SessionRow
    from acode.sync.status import SyncStatus

__all__ = [
    "duration_text",
    "event_json",
    "print_history",
    "print_preview",
    "print_session_list",
    "print_status",
    "session_json",
    "session_table",
    "usage_line",
]


def _now_us() -> int:
    return time.time_ns() // 1000


def session_json(row: SessionRow, summary: SessionSummary | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": row.id,
        "short_id": row.short_id,
        "state": row.state,
        "title": row.title,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "workspace": row.workspace,
        "kind": row.kind,
        "current_task": row.current_task,
        "current_step": row.current_step,
        "archived": row.archived,
    }
    if summary is not None:
        data["steps_completed"] = summary.steps_completed
        data["steps_failed"] = summary.steps_failed
        data["total_steps"] = summary.total_steps
        data["pending_approval"] = summary.pending_approval
        data["resumes"] = summary.resumes
        data["reason"] = summary.reason
    return data


_LIST_HEADER = ("ID", "STATE", "UPDATED", "AT STEP", "TITLE")
_AT_STEP_WIDTH = 24


def print_session_list(rows: list[SessionRow], as_json: bool) -> None:
    if as_json:
        emit_json([session_json(r) for r in rows])
        return
    if not rows:
        out_console().print("No sessions here yet. Start one with: acode run PLAN.yaml")
        return
    now = _now_us()
    values = [
        (
            r.short_id,
            f"{r.state} (discarded)" if r.archived else r.state,
            ago(r.updated_at, now),
            r.current_step or "-",
            r.title,
        )
        for r in rows
    ]
    # Rich costs more to load than the listing itself: a table it would draw plainly
    # (into a pipe, nothing to fold or cut) is written as it would draw it.
    if plain_output():
        limits = (None, None, None, _AT_STEP_WIDTH, None)
        masked = [[redact(value) for value in row] for row in values]
        plain = plain_table(_LIST_HEADER, masked, limits, console_width())
        if plain is not None:
            emit_text(plain)
            return
    out_console().print(session_table(values))


def session_table(values: list[tuple[str, str, str, str, str]]) -> Table:
    """The sessions as Rich draws them: each row's values, masked whole (``cells``)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    # Headers as Text, as the cells are: a string would be read as markup, which loads
    # Rich's table of emoji names (thousands of entries) for text that has none.
    id_, state, updated, at_step, title = (Text(h) for h in _LIST_HEADER)
    table.add_column(id_, no_wrap=True)
    table.add_column(state, no_wrap=True)
    table.add_column(updated, no_wrap=True)
    table.add_column(at_step, overflow="ellipsis", max_width=_AT_STEP_WIDTH)
    table.add_column(title, overflow="ellipsis", ratio=1)
    for row in values:
        table.add_row(*cells(*row))
    return table


def usage_line(usage: Usage) -> str:
    """ "12 calls, 48,210 tokens (45,002 in, 3,208 out), $0.1445"."""
    text = (
        f"{count(usage.calls, 'call')}, {usage.total_tokens:,} tokens "
        f"({usage.prompt_tokens:,} in, {usage.completion_tokens:,} out)"
    )
    return text + (f", ${usage.cost_usd:.4f}" if usage.cost_usd is not None else "")


def print_status(
    row: SessionRow,
    summary: SessionSummary,
    lock_holder: str | None,
    as_json: bool,
    *,
    sync: SyncStatus | None = None,
    usage: Usage | None = None,
    position: Position | None = None,
    handoff: HandoffStatus | None = None,
    store: str | None = None,
    lease: LeaseHolder | None = None,
) -> None:
    """``sync`` None: no remote is configured. ``position``: the step the session is at,
    placed in its plan. ``handoff`` None: hand-off is off. ``store``: where the sessions
    are kept (``EventStore.location``: no password). ``lease``: the holder of its lease
    in a PostgreSQL store, of any machine."""
    in_store = store is not None and store.startswith(POSTGRESQL)
    if as_json:
        data = session_json(row, summary)
        data["position"] = position.to_dict() if position is not None else None
        data["lock"] = lock_holder
        data["lease"] = _lease_json(lease)
        data["store"] = store_json(store, row.workspace) if store is not None else None
        data["sync"] = status_sync_json(sync, in_store=in_store)
        data["usage"] = usage.to_dict() if usage is not None else None
        data["handoff"] = handoff_json(handoff)
        emit_json(data)
        return
    console = out_console()
    total = f"/{summary.total_steps}" if summary.total_steps is not None else ""
    lines = [
        f"Session: {row.short_id}  ({row.id})",
        f"Title:   {row.title}",
        f"State:   {row.state}"
        + (" (discarded)" if row.archived else "")
        + (f" ({summary.reason})" if summary.reason else ""),
        f"Steps:   {summary.steps_completed}{total} completed"
        + (f", {summary.steps_failed} failed" if summary.steps_failed else ""),
    ]
    if position is not None:
        lines.append(f"At:      {position.describe()}")
    elif summary.current_step:
        where = f"{summary.current_task} > " if summary.current_task else ""
        lines.append(f"At:      {where}{summary.current_step}")
    if summary.pending_approval:
        lines.append(
            f"Waiting: approval of {summary.pending_approval}: acode approve {row.short_id} "
            "(add --deny to refuse)"
        )
    if usage is not None and usage.calls:
        lines.append(f"Model:   {usage_line(usage)}")
    lines.append(f"Updated: {ago(row.updated_at, _now_us())} ({iso(row.updated_at)})")
    if lock_holder is None and lease is not None:  # running on another machine
        lines.append(f"Lock:    free here; the store's lease: {_lease_text(lease)}")
    else:
        lines.append(f"Lock:    {lock_holder or 'free'}")
    if store is not None and in_store:
        lines += store_lines(store, row.workspace)
    else:
        lines += status_sync_lines(sync, running=lock_holder is not None)
    if handoff is not None:
        from acode.engine.catalog import is_resumable_row

        resume_id = row.short_id if is_resumable_row(row) else None
        lines += handoff_lines(handoff, running=lock_holder is not None, resume_id=resume_id)
    for line in lines:
        console.print(line, markup=False)


def _lease_text(lease: LeaseHolder) -> str:
    from acode.store.leases import iso as lease_iso

    return f"{lease.describe()}, until {lease_iso(lease.expires)} (epoch {lease.epoch})"


def _lease_json(lease: LeaseHolder | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    from acode.store.leases import iso as lease_iso

    return {
        "host": lease.host,
        "pid": lease.pid,
        "since": lease_iso(lease.since),
        "expires": lease_iso(lease.expires),
        "epoch": lease.epoch,
    }


def print_steps(steps: list[StepRecord]) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("#", "STEP", "TASK", "KIND", "STATUS", "ATTEMPT"):
        table.add_column(name, no_wrap=name != "STEP")
    for s in steps:
        table.add_row(
            *cells(
                str(s.position + 1),
                s.step_id,
                s.task_id or "-",
                s.kind,
                s.status.value,
                str(s.attempt),
            )
        )
    out_console().print(table)


def event_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "event_id": event.event_id,
        "ts": iso(event.ts_us),
        "ts_us": event.ts_us,
        "type": event.type.value,
        "payload": redact_json(event.payload),
        "hash": event.hash.hex(),
    }


def _event_detail(event: Event) -> str:
    p = event.payload
    match event.type.value:
        case "state_changed":
            return f"{p['from']} -> {p['to']}" + (f" ({p['reason']})" if p.get("reason") else "")
        case "session_created":
            return str(p.get("title", ""))
        case "session_resumed":
            return (
                f"skipped {count(p.get('skipped_steps', 0), 'step')} from checkpoint "
                f"{p.get('checkpoint_id')}"
            )
        case "approval_decided":
            return f"{'approved' if p.get('approved') else 'denied'} by {p.get('by')}"
        case "step_failed":
            return redact(str(p.get("error", "")))[:80]  # masked, then cut
        case "checkpoint_marked":
            return f"{p.get('label')!r} by {p.get('by')}"
        case "worktree_recorded":
            return f"work tree at {str(p.get('commit'))[:12]}"
        case _:
            return ""


def print_history(events: list[Event], as_json: bool) -> None:
    if as_json:
        emit_json([event_json(e) for e in events])
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("SEQ", justify="right", no_wrap=True)
    table.add_column("TIME (UTC)", no_wrap=True)
    table.add_column("EVENT", no_wrap=True)
    table.add_column("STEP", overflow="ellipsis", max_width=24)
    table.add_column("DETAIL", overflow="ellipsis", ratio=1)
    for e in events:
        step = e.payload.get("step")
        table.add_row(
            *cells(
                str(e.seq), iso(e.ts_us), e.type.value, str(step) if step else "", _event_detail(e)
            )
        )
    out_console().print(table)


def _where(preview: ResumePreview) -> str:
    at = preview.resume_at
    if at is not None:
        return at.describe()
    s = preview.summary
    return f"step {s.next_position + 1}" if s.current_step else "the start"


def preview_json(preview: ResumePreview) -> dict[str, Any]:
    data = preview.log_record()
    if preview.environment is not None:
        data["environment"] = preview.environment.to_dict()
    data["state"] = preview.summary.state.value
    data["title"] = preview.row.title
    data["resume_at"] = _where(preview)
    at, last = preview.resume_at, preview.last_completed
    data["resume_position"] = at.to_dict() if at is not None else None
    data["last_completed"] = last.to_dict() if last is not None else None
    data["work_time"] = preview.work_time.to_dict() if preview.work_time is not None else None
    if preview.continuation is not None:
        data["continuation"] = preview.continuation.to_dict()
    data["handoff"] = preview.handoff.to_dict() if preview.handoff is not None else None
    return data


def environment_lines(preview: ResumePreview) -> list[str]:
    """The environment report as the manual shows it."""
    env = preview.environment
    if env is None:
        return ["Environment validation: off (resume.validate_environment: false)"]
    mark = {True: "✓", False: "✗"}
    lines = [
        "Validating environment...",
        f"  {mark[env.workspace_exists]} Working directory exists",
    ]
    lines += changed_file_lines(env)
    rollback = env.rollback
    since = [c for c in env.changed if c.since_pause]
    if since or (rollback is not None and rollback.as_left is not None):
        # The files the session touched are listed above: what the pause's snapshot
        # adds is the rest of the work tree.
        lines.append(
            f"  {_mark(since)} Rest of the work tree, as the pause left it: "
            + (f"{len(since)} changed" if since else "unchanged")
        )
        lines += _change_lines(since)
    if rollback is not None and rollback.changes_anything:
        lines += _rollback_lines(rollback)
    if env.model is not None:
        ok = env.model.problem is None
        state = "available" if ok else f"unavailable: {env.model.problem}"
        lines.append(f"  {mark[ok]} Model {env.model.name} {state}")
    lines.append(
        f"  {mark[not env.config]} Configuration "
        + ("unchanged" if not env.config else "changed: " + ", ".join(c.key for c in env.config))
    )
    return lines


def changed_file_lines(env: EnvironmentReport, *, rest: bool = False) -> list[str]:
    """The files the session touched: how many were checked, and each that changed;
    ``rest``: and the rest of the work tree's changes since a pause, if any."""
    touched = [c for c in env.changed if not c.since_pause]
    lines = [
        f"  {_mark(touched)} Files the session touched: {env.files_checked} checked"
        + (f", {len(touched)} changed" if touched else ", unchanged"),
        *_change_lines(touched),
    ]
    since = [c for c in env.changed if c.since_pause]
    if rest and since:
        lines.append(f"  {_mark(since)} Rest of the work tree, as the pause left it:")
        lines += _change_lines(since)
    return lines


def _mark(changes: list[ChangedFile]) -> str:
    """✗: a change stops the resume until you say; ⚠: changes that only inform."""
    if not changes:
        return "✓"
    return "✗" if any(c.blocking for c in changes) else "⚠"


def _change_lines(changes: list[ChangedFile]) -> list[str]:
    now = _now_us()
    lines = []
    for change in changes:
        when = f", {ago(change.modified_ns // 1000, now)}" if change.modified_ns else ""
        lines.append(f"    - {change.path} ({change.change.value.lower()}{when})")
        by = f"{change.touched_by.describe()}; " if change.touched_by is not None else ""
        if change.since_pause:
            by = "changed since the pause; "
        lines.append(f"      {change.severity.value}: {by}{change.reason}")
    return lines


def environment_verdict(env: EnvironmentReport | None, *, dry_run: bool) -> str:
    """The report's last line: whether the resume goes on, and with what."""
    if env is None:
        return "" if dry_run else "Resuming..."
    changed = len(env.changed)
    if dry_run:
        if env.problems():
            return "Environment not ready: the resume would stop (exit 17)."
        if env.config:
            return "Environment not ready: the configuration changed (the resume stops)."
        if env.blocking:
            return (
                f"Environment not ready: {count(len(env.blocking), 'blocking change')} "
                "(the resume asks, or stops without a terminal; --continue-on-changes goes on)."
            )
        if changed:
            return f"Environment ready: {count(changed, 'changed file')}, none blocking."
        return "Environment ready."
    if changed:
        return f"Environment ready: {count(changed, 'changed file')} kept as found. Resuming..."
    return "Environment ready. Resuming..."


def _rollback_lines(rollback: RollbackPreview) -> list[str]:
    """What the rollback of the interrupted step will revert, delete and keep, and where
    what it reverts is kept: never done without a word."""
    from acode.engine.rollback import restore_hint

    lines = [
        f"  ↺ Rolling back step {rollback.step} restores the work tree it started from "
        f"(snapshot {rollback.snapshot[:12]}):"
    ]
    lines += [f"    - {path}: put back as it was before the step ran" for path in rollback.revert]
    lines += [f"    - {path}: deleted (not there before the step ran)" for path in rollback.delete]
    lines += [f"    - {path}: left as it is ({why})" for path, why in rollback.kept]
    if rollback.revert or rollback.delete:
        lines.append(
            f"    The files as they are now are kept first at {rollback.backup_ref}; to take "
            f"one back: {restore_hint(rollback.backup_ref)}"
        )
    return lines


def _unsynced(preview: ResumePreview) -> str:
    return "none needed: in the PostgreSQL store" if preview.in_store else "local only"


def _agent_lines(preview: ResumePreview) -> list[str]:
    if preview.agent is None:
        return []
    return [
        f"  Task: {preview.agent.task}",
        "  Conversation: rebuilt from the log; answered model calls are not sent again",
    ]


def duration_text(us: int) -> str:
    """ "0.4s", "42s", "90 min", "3 h 05 min": as precise as a person reads it."""
    seconds = us / 1e6
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{round(seconds)}s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _time_line(work: WorkTime | None) -> list[str]:
    """What the completed steps took, as recorded, and the estimate of the rest."""
    if work is None:
        return []
    took = duration_text(work.completed_us)
    done = f"{count(work.completed_steps, 'completed step')} took {took}"
    estimate = work.remaining_estimate_us
    if work.remaining_steps is None:
        rest = "the remaining: unknown (the model decides the steps to come)"
    elif estimate is None:
        rest = f"the {work.remaining_steps} remaining: unknown (no step completed yet)"
    else:
        rest = (
            f"the {work.remaining_steps} remaining: about {duration_text(estimate)} at their mean"
        )
    return [f"  Time: {done}; {rest}"]


def _last_checkpoint(preview: ResumePreview) -> str:
    last = preview.last_completed
    if last is None:
        return "the start (no step completed yet)"
    return last.describe()


def print_preview(
    preview: ResumePreview, *, dry_run: bool, as_json: bool, verdict: bool = True
) -> None:
    """``verdict``: end with whether the environment lets the resume go on (preflight's
    question is its own)."""
    if as_json:
        emit_json({**preview_json(preview), "event": "resume_preview" if dry_run else "resuming"})
        return
    s, c = preview.summary, preview.continuation
    short = preview.row.short_id
    # An agent's steps become known as the model works: there is no count to show.
    remaining = (
        f"{count(s.total_steps - s.steps_completed, 'step')}" if s.total_steps is not None else None
    )
    lines: list[str]
    if dry_run:
        lines = [
            f"Would resume session {short}: {preview.row.title}",
            f"  Current state: {s.state.value}",
            f"  Last checkpoint: {_last_checkpoint(preview)}",
            f"  Skipping: {count(s.steps_completed, 'step')} (complete)",
            f"  Remaining: {remaining + ', ' if remaining else ''}from {_where(preview)}",
            *_time_line(preview.work_time),
        ]
        if c is not None and c.in_progress:
            lines.append(f"  In progress: {c.in_progress} ({c.in_progress_action})")
        sync = sync_summary(preview.sync) if preview.sync else _unsynced(preview)
        lines.append(f"  Sync status: {sync}")
        lines += arrival_lines(preview.handoff, dry_run=True)
        lines += _agent_lines(preview)
        lines += environment_lines(preview)
    else:
        lines = [
            f"Resuming session {short}: {preview.row.title}",
            f"  Loaded state: {s.state.value} at {_where(preview)}",
        ]
        if c is not None and preview.plan is not None:
            for number, task in enumerate(preview.plan.tasks, start=1):
                if task.id in c.skipped_tasks:
                    lines.append(f"  Skipping: Task {number}: {task.title} (complete)")
            if c.resume_step_number and c.resume_step_number > 1:
                last = c.resume_step_number - 1
                steps = "Step 1" if last == 1 else f"Steps 1-{last}"
                lines.append(f"  Skipping: Task {c.resume_task_number}, {steps} (complete)")
            if c.in_progress:
                lines.append(f"  In progress: {c.in_progress} -> {c.in_progress_action}")
        lines += arrival_lines(preview.handoff, dry_run=False)
        lines += _agent_lines(preview)
        left = f"; {remaining} remaining" if remaining else ""
        lines.append(f"  Starting from: {_where(preview)}{left}")
        lines += _time_line(preview.work_time)
        # Every resume says what it checked (001's manual), and a rollback what it
        # reverts before it is done.
        lines += environment_lines(preview)
    said = environment_verdict(preview.environment, dry_run=dry_run) if verdict else ""
    if said:
        lines.append(said)
    print_lines(lines)
