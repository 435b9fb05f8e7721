"""A session arriving from another machine: its work tree, recorded on its hand-off ref
there, brought into this clone before the resume's environment check (docs/fleet.md,
"Hand-off: resume on another machine").

The commit to bring is the one the session's authenticated history names (its newest
``worktree_recorded`` event), never what a ref says: the ref on the remote is fetched
and must hold that commit, or the resume is refused. A clone whose own ref already
holds it (the machine that ran the session, or one that took it over before) has
nothing to bring: its work tree is the session's own, checked as on any resume.

The resume service asks here only with hand-off on or a workspace name in a shared
store (``service._may_arrive``): without either no session recorded a work tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from acode.domain.events import EventType
from acode.errors import EnvironmentValidationError, ErrorCode
from acode.system.handoff_fetch import (
    check_out,
    fetch_ref,
    has_commit,
    holds,
    local_changes,
    same_repository,
    tree_changes,
)
from acode.system.handoff_ref import handoff_ref, move_ref, read_ref
from acode.system.log import log_event
from acode.system.snapshot_index import Repository, find_repository, worktree_tree

if TYPE_CHECKING:
    from acode.engine.journal import Journal
    from acode.engine.lifecycle import Workspace

__all__ = ["Arrival", "arrive", "pending_arrival"]

# The files a refusal names, at most; the rest are counted.
_NAMED = 10


class Arrival(NamedTuple):
    """What bringing the session's work tree here does: the commit its history names
    (``tree``, on ``head``), fetched from ``remote`` when ``fetch``; the files the
    check-out writes or removes (None: known once fetched), those of them with local
    changes, and the commit HEAD is detached at (None: HEAD stays)."""

    ref: str
    remote: str | None
    commit: str
    tree: str
    head: str | None
    recorded_in: str  # the directory the session started in
    fetch: bool
    changes: tuple[str, ...] | None
    conflicts: tuple[str, ...]
    detach_at: str | None
    # The snapshots a step left running there rolls back to, fetched (or to fetch) too.
    snapshots: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


class _Named(NamedTuple):
    commit: str
    tree: str
    head: str | None


def pending_arrival(journal: Journal, ws: Workspace) -> Arrival | None:
    """What :func:`arrive` would do, found without fetching or writing anything; None
    when the work tree is the session's own here."""
    found = _found(journal, ws)
    if found is None:
        return None
    named, repo, recorded_in = found
    fetch = not has_commit(ws.root, named.commit)
    if fetch:
        return Arrival(
            handoff_ref(journal.row.id),
            ws.config.handoff.remote,
            *named,
            recorded_in,
            fetch=True,
            changes=None,
            conflicts=(),
            detach_at=None,
        )
    return _planned(journal, ws, named, repo, recorded_in, fetch=False)[0]


def arrive(journal: Journal, ws: Workspace, *, force: bool) -> Arrival | None:
    """Bring the work tree the session's history names into this clone: fetched from
    ``handoff.remote`` if it is not here, checked against the history, and checked out.
    Refuses (EnvironmentValidationError, exit 17, nothing changed) a remote that cannot
    be reached or does not hold that commit, a clone of another repository, and files
    with local changes the check-out would overwrite, unless ``force``."""
    found = _found(journal, ws)
    if found is None:
        return None
    named, repo, recorded_in = found
    short, ref = journal.row.short_id, handoff_ref(journal.row.id)
    fetched = not has_commit(ws.root, named.commit)
    if fetched:
        _fetch(ws, ref, named.commit, short)
    arrival, changes = _planned(journal, ws, named, repo, recorded_in, fetch=fetched)
    if arrival.conflicts and not force:
        raise _local_changes(arrival, short)
    check_out(repo.top, named.tree, changes, detach_at=arrival.detach_at)
    # The session's hand-off goes on from the commit its history names; a ref left here
    # by an older run of it is replaced (its commits are the history's past).
    old = read_ref(ws.root, ref)
    move_ref(ws.root, ref, named.commit, old.commit if old is not None else None)
    log_event(
        ws.paths,
        "handoff_arrived",
        session_id=journal.row.id,
        commit=named.commit,
        fetched=fetched,
        files=len(changes),
        overwritten=list(arrival.conflicts),
        detached_at=arrival.detach_at,
    )
    return arrival


def _found(journal: Journal, ws: Workspace) -> tuple[_Named, Repository, str] | None:
    """The commit to bring, when there is one: None when the session recorded no work
    tree, or this clone's ref holds the one it names. A session recorded in another
    directory that has no work tree to bring is refused."""
    named_store = bool(ws.config.store.url and ws.config.store.workspace)
    events = journal.history.of_type(EventType.WORKTREE_RECORDED)
    created = journal.history.event(1).payload
    recorded_in = str(created.get("workspace") or journal.row.workspace)
    short = journal.row.short_id
    if not events:
        # Only a name shared by clones in other directories shows a session recorded
        # elsewhere; a SQLite file or a path moves with its workspace.
        if named_store and recorded_in != str(ws.root):
            raise _elsewhere_without_tree(short, recorded_in)
        return None
    payload = events[-1].payload
    named = _Named(str(payload["commit"]), str(payload["tree"]), payload.get("head"))
    if holds(ws.root, handoff_ref(journal.row.id), named.commit):
        return None
    repo = find_repository(ws.root)
    if repo is None:
        raise EnvironmentValidationError(
            f"session {short} recorded its work tree in git (commit {named.commit[:12]}), "
            f"and {ws.root} is in no git repository",
            hint="resume it in a clone of its repository: git clone URL DIR, then "
            f"acode resume {short} --workspace DIR; nothing was changed",
            code=ErrorCode.HANDOFF_OTHER_WORKSPACE,
        )
    return named, repo, recorded_in


def _planned(
    journal: Journal,
    ws: Workspace,
    named: _Named,
    repo: Repository,
    recorded_in: str,
    *,
    fetch: bool,
) -> tuple[Arrival, list[tuple[str, str]]]:
    """The check-out, with the commit's objects here, and the changes it makes
    (``tree_changes``); refused when the commit is of another repository."""
    short = journal.row.short_id
    if (
        named.head is not None
        and repo.head is not None
        and not same_repository(ws.root, named.head, repo.head)
    ):
        raise _other_repository(short, named.commit, recorded_in, ws)
    detach_at = named.head if named.head is not None and named.head != repo.head else None
    current = worktree_tree(ws.root, repo)
    changes = tree_changes(repo.top, current, named.tree)
    changed = [path for _, path in changes]
    local = local_changes(repo.top, repo.head, current)
    # Moving HEAD overwrites whatever differs from it; otherwise only what the tree changes.
    conflicts = sorted(local if detach_at is not None else local & set(changed))
    arrival = Arrival(
        handoff_ref(journal.row.id),
        ws.config.handoff.remote,
        *named,
        recorded_in,
        fetch=fetch,
        changes=tuple(changed),
        conflicts=tuple(conflicts),
        detach_at=detach_at,
    )
    return arrival, changes


def _fetch(ws: Workspace, ref: str, commit: str, short: str) -> None:
    remote = ws.config.handoff.remote
    if remote is None:
        raise EnvironmentValidationError(
            f"the work tree of session {short} (commit {commit[:12]}) is not in this clone, "
            "and handoff.remote names no git remote to fetch it from",
            hint="set handoff.remote in .agent/config.yml to the git remote the session's "
            f"machine pushes to (handoff: {{remote: origin}}), then: acode resume {short}; "
            "nothing was changed",
            code=ErrorCode.HANDOFF_FETCH,
        )
    fetched = fetch_ref(ws.root, remote, ref, commit)
    if fetched.at is None:
        raise EnvironmentValidationError(
            f"cannot fetch the work tree of session {short} from {remote}: {fetched.reason}",
            hint=f"check the remote (git ls-remote {remote} {ref}), then run "
            f"`acode resume {short}` again; nothing was changed",
            code=ErrorCode.HANDOFF_FETCH,
        )
    if not fetched.holds:
        raise EnvironmentValidationError(
            f"{ref} on {remote} is at {fetched.at[:12]}, which is not the work tree "
            f"session {short}'s signed history names ({commit[:12]}) nor one after it: "
            "the ref was moved or forged",
            hint=f"refusing to use it; push the session's ref again from the machine that "
            f"ran it (acode sync there), then `acode resume {short}`; nothing was changed",
            code=ErrorCode.HANDOFF_FORGED,
        )


def _local_changes(arrival: Arrival, short: str) -> EnvironmentValidationError:
    named = ", ".join(arrival.conflicts[:_NAMED])
    more = len(arrival.conflicts) - _NAMED
    if more > 0:
        named += f" and {more} more"
    return EnvironmentValidationError(
        f"bringing the work tree of session {short} here would overwrite local changes: {named}",
        hint="commit or stash them (git stash --include-untracked), then run "
        f"`acode resume {short}` again; or overwrite them: acode resume {short} --force",
    )


def _other_repository(
    short: str, commit: str, recorded_in: str, ws: Workspace
) -> EnvironmentValidationError:
    return EnvironmentValidationError(
        f"session {short} was recorded in {recorded_in}, a clone of another repository "
        f"(its work tree {commit[:12]} shares no commit with this one's HEAD): two "
        f"repositories are using the name {ws.config.store.workspace!r} in the store",
        hint="give each repository its own store.workspace in .agent/config.yml; "
        "nothing was changed",
        code=ErrorCode.HANDOFF_OTHER_WORKSPACE,
    )


def _elsewhere_without_tree(short: str, recorded_in: str) -> EnvironmentValidationError:
    return EnvironmentValidationError(
        f"session {short} was recorded in {recorded_in}, and its work tree was not "
        "recorded there (handoff.remote unset, or no step changed a file yet): its files "
        "cannot be brought here",
        hint=f"resume it where it was recorded (acode resume {short} --workspace "
        f"{recorded_in}), or set handoff.remote there for the sessions to come; "
        "nothing was changed",
        code=ErrorCode.HANDOFF_OTHER_WORKSPACE,
    )
