"""How the hand-off ref looks in `acode status` and `acode sync`, and a work tree
arriving from another machine in `acode resume` (docs/fleet.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from acode.cli.console import ago, count, err_console, iso, out_console

if TYPE_CHECKING:
    from acode.engine.handoff import HandoffStatus, RefsPushed
    from acode.resume.arrival import Arrival

__all__ = [
    "arrival_lines",
    "handoff_json",
    "handoff_lines",
    "handoff_summary",
    "print_refs_pushed",
    "refs_pushed_json",
]


def _short(commit: str | None) -> str:
    return commit[:12] if commit else "none"


def arrival_lines(arrival: Arrival | None, *, dry_run: bool) -> list[str]:
    """The work tree brought from another machine: what a dry run would fetch and
    check out, what a resume did."""
    if arrival is None:
        return []
    from_where = f" from {arrival.remote}" if arrival.remote else ""
    if dry_run:
        lines = [f"  Work tree: recorded in {arrival.recorded_in}, not here"]
        if arrival.fetch:
            lines.append(f"    Would fetch {arrival.ref}{from_where}")
        lines.append(f"    Would check out commit {_short(arrival.commit)} (the history names it)")
    else:
        fetched = f"fetched {arrival.ref}{from_where}, " if arrival.fetch else ""
        lines = [f"  Work tree: {fetched}checked out commit {_short(arrival.commit)}"]
    verb = "Would fetch" if dry_run else "Fetched"
    lines += [
        f"    {verb} {ref}: the snapshot the step left running there rolls back to"
        for ref in arrival.snapshots
    ]
    if arrival.detach_at is not None:
        verb = "Would detach" if dry_run else "Detached"
        lines.append(f"    {verb} HEAD at {_short(arrival.detach_at)}: your branches stay")
    if arrival.changes is None:
        lines.append("    Files: known once fetched; then checked against the history")
    else:
        verb = "would change" if dry_run else "changed"
        lines.append(f"    Files it {verb}: {len(arrival.changes)}")
    if arrival.conflicts:
        said = "would overwrite" if dry_run else "overwrote"
        lines.append(
            f"    ✗ Local changes it {said}: {', '.join(arrival.conflicts[:10])}"
            + (" (--force overwrites them)" if dry_run else "")
        )
    return lines


def handoff_summary(status: HandoffStatus) -> str:
    """The hand-off in a few words."""
    if status.elsewhere is not None:
        return "recorded in another clone; this one does not hold its work tree"
    if not status.in_git:
        return "nothing to record: the workspace is not in a git repository"
    if status.recorded is None:
        return "nothing recorded yet"
    if status.unpushed == 0:
        return "pushed ✓"
    if status.conflict:
        return "push refused (the remote holds another history of this session)"
    steps = "some steps" if status.unpushed is None else count(status.unpushed, "step")
    if status.failing_since_us is not None:
        return f"{steps} not pushed yet (push failing)"
    return f"{steps} not pushed yet"


def handoff_lines(
    status: HandoffStatus | None, running: bool, resume_id: str | None = None
) -> list[str]:
    """The `Hand-off:` section of `acode status`; none when hand-off is off.
    ``running``: a process holds the session (its pusher retries by itself);
    ``resume_id``: the id to resume it by, None when it cannot be resumed."""
    if status is None:
        return []
    if status.elsewhere is not None:
        lines = [
            f"Hand-off: {handoff_summary(status)}",
            f"  Ref:      {status.ref} -> {status.remote}",
            f"  Recorded: {_short(status.elsewhere)} (the history names it); here: "
            f"{_short(status.recorded)}",
        ]
        if resume_id is not None:
            lines.append(
                f"  Bring it here with: acode resume {resume_id} "
                "(--dry-run first shows what it fetches and changes)"
            )
        else:
            lines.append(
                f"  See it with: git fetch {status.remote} {status.ref} && git show --stat "
                "FETCH_HEAD"
            )
        return lines
    if not status.in_git:
        return [f"Hand-off: {handoff_summary(status)}"]
    now = time.time_ns() // 1000
    lines = [
        f"Hand-off: {handoff_summary(status)}",
        f"  Ref:      {status.ref} -> {status.remote}",
        f"  Recorded: {_short(status.recorded)}",
        f"  Pushed:   {_short(status.pushed)}",
    ]
    if status.recorded is None or status.unpushed == 0:
        return lines
    if status.reason is not None and status.failing_since_us is not None:
        lines.append(
            f"  Push failing since {iso(status.failing_since_us)} "
            f"({ago(status.failing_since_us, now)}): {status.reason}"
        )
    if status.conflict:
        lines.append(
            f"  Compare: git fetch {status.remote} {status.ref} && git log FETCH_HEAD {status.ref}"
        )
    elif running and status.push and status.next_try_us is not None:
        wait = max(0, (status.next_try_us - now) // 1_000_000)
        lines.append(f"  Next try: in {wait}s")
    else:
        lines.append("  Push it now with: acode sync")
    return lines


def _state(status: HandoffStatus) -> str:
    if status.elsewhere is not None:
        return "elsewhere"
    if not status.in_git:
        return "no_repository"
    if status.recorded is None:
        return "nothing_recorded"
    if status.unpushed == 0:
        return "pushed"
    if status.conflict:
        return "conflict"
    return "failing" if status.failing_since_us is not None else "pending"


def handoff_json(status: HandoffStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {
        "status": _state(status),
        "remote": status.remote,
        "ref": status.ref,
        "recorded": status.recorded,
        "pushed": status.pushed,
        "unpushed_steps": status.unpushed,
        "push": status.push,
        "failures": status.failures,
        "failing_since": iso(status.failing_since_us) if status.failing_since_us else None,
        "reason": status.reason,
        "next_try": iso(status.next_try_us) if status.next_try_us else None,
        "elsewhere": status.elsewhere,
    }


def refs_pushed_json(refs: RefsPushed) -> dict[str, Any]:
    return {
        "remote": refs.remote,
        "status": "up_to_date" if refs.reason is None else "failing",
        "pushed": list(refs.pushed),
        "waiting": list(refs.waiting),
        "reason": refs.reason,
    }


def print_refs_pushed(refs: RefsPushed) -> None:
    """`acode sync`'s lines about the hand-off refs."""
    if refs.reason is None:
        text = (
            f"Pushed the work tree of {count(len(refs.pushed), 'session')} to {refs.remote}."
            if refs.pushed
            else f"Nothing to push: {refs.remote} has every session's work tree."
        )
        out_console().print(f"{text}\nHand-off: Up to date ✓", markup=False)
        return
    lines = [
        f"Hand-off: {count(len(refs.waiting), 'session')} not pushed to {refs.remote}",
        f"  Reason: {refs.reason}",
    ]
    if refs.pushed:
        lines.append(f"  Pushed: {count(len(refs.pushed), 'session')}")
    lines.append("Note: the refs are kept; `acode sync --wait` retries until the remote answers.")
    err_console().print("\n".join(lines), markup=False)
