"""The git operations acode needs: checkpoint commits marked with trailers, finding them,
and private snapshots of the work tree ("ghost commits") that a run step rolls back to.

Everything runs the ``git`` command line in the workspace and never writes git
configuration: a missing identity is supplied through environment variables for acode's
own commits only. The user's hooks run as they would for any commit.

A snapshot is a commit kept under ``refs/acode/`` and built through a temporary index:
the user's index, HEAD, branches and stash are never touched. File contents are stored
and restored byte for byte, bypassing clean/smudge filters and end-of-line conversion,
so that a restore gives back exactly the bytes that were there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from acode.errors import StepFailedError, UsageError
from acode.runtime.atomic import write_at
from acode.runtime.beneath import Beneath
from acode.runtime.procfs import open_files, processes
from acode.security.child_env import child_environment

__all__ = [
    "BACKUP_SUFFIX",
    "FALLBACK_EMAIL",
    "FALLBACK_NAME",
    "SNAPSHOT_MESSAGE",
    "SNAPSHOT_REF_ROOT",
    "SnapshotEntry",
    "clear_stale_index_lock",
    "commit_all",
    "commit_preview",
    "drop_snapshot",
    "find_commit_with_trailer",
    "is_work_tree",
    "keep_backup",
    "prune_snapshots",
    "read_blob",
    "snapshot_files",
    "snapshot_ref",
    "snapshot_worktree",
    "worktree_files",
    "write_back",
]

FALLBACK_NAME = "acode"
FALLBACK_EMAIL = "acode@localhost"
# git's own trailer keys are tokens: letters, digits and dashes.
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")

SNAPSHOT_REF_ROOT = "refs/acode"
SNAPSHOT_MESSAGE = "acode snapshot"
# One component of a snapshot ref: a subset of what git accepts (no '..', no leading dot).
_REF_PART = re.compile(r"[A-Za-z0-9_%-][A-Za-z0-9_.%-]*")
_MODE_FILE = "100644"
_MODE_EXEC = "100755"
_MODE_LINK = "120000"
_STATE_PARTS = [".agent", "state"]
_RESTORE_HINT = (
    "resume with --strategy retry to run the command again without restoring the work tree"
)


def _git(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``workspace`` with ``env`` added to the environment (acode's secrets are
    left out: git runs the repository's hooks); failures are returned, not raised (see
    :func:`_git_ok`)."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=workspace,
            env=child_environment(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise StepFailedError(
            f"cannot run git in {workspace}: {exc}",
            hint="install git and check that the workspace directory exists",
        ) from exc


def _git_ok(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    result = _git(workspace, args, env=env)
    if result.returncode != 0:
        detail = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
        raise StepFailedError(
            f"git {args[0]} failed in {workspace}: {detail}",
            hint="fix the problem git reports (a hook, a lock file, permissions)",
        )
    return result.stdout


def is_work_tree(workspace: Path) -> bool:
    """True when ``workspace`` is inside a git work tree (and git can be run there)."""
    try:
        result = _git(workspace, ["rev-parse", "--is-inside-work-tree"])
    except StepFailedError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "true"


def find_commit_with_trailer(workspace: Path, key: str, value_prefix: str) -> str | None:
    """The newest commit reachable from HEAD with a trailer ``key: value`` whose value
    starts with ``value_prefix``; None when there is none, HEAD has no commits yet, or
    ``workspace`` is not in a git repository."""
    _check_trailer(key, value_prefix)
    if _git(workspace, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).returncode != 0:
        return None
    # --grep narrows the scan cheaply; the trailer block is then checked exactly below,
    # because the grep also matches the string anywhere in a message.
    out = _git_ok(
        workspace,
        [
            "log",
            # A user's log.showSignature or color.ui=always would mix text into the format.
            "--no-show-signature",
            "--no-color",
            "--fixed-strings",
            f"--grep={key}: {value_prefix}",
            "--format=%H%x00%B%x00",
            "HEAD",
            "--",
        ],
    )
    fields = out.split("\0")
    for sha, message in zip(fields[0::2], fields[1::2], strict=False):
        if _has_trailer(message, key, value_prefix):
            return sha.strip()
    return None


def _has_trailer(message: str, key: str, value_prefix: str) -> bool:
    paragraphs = re.split(r"\n\s*\n", message.strip())
    if len(paragraphs) < 2:
        return False  # a lone paragraph is the subject and body, never a trailer block
    for line in paragraphs[-1].splitlines():
        name, sep, value = line.partition(": ")
        if sep and name == key and value.strip().startswith(value_prefix):
            return True
    return False


def clear_stale_index_lock(workspace: Path, *, wait_s: float = 30.0) -> bool:
    """Remove ``index.lock`` when no process has it open: a git killed in the middle of
    a commit (a crash, a power cut) leaves it, and every later commit would fail on it.
    A lock some running git holds is never touched; it is waited for (up to ``wait_s``),
    since a git orphaned by a killed acode finishes and lets go. True when one was
    removed."""
    lock = Path(_git_ok(workspace, ["rev-parse", "--git-path", "index.lock"]).strip())
    lock = lock if lock.is_absolute() else workspace / lock
    deadline = time.monotonic() + wait_s
    while lock.exists() and _held_open(lock):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    if not lock.exists():
        return False
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()
    return True


def _held_open(path: Path) -> bool:
    if not os.path.isdir("/proc"):
        return True  # cannot tell: assume a live git owns it
    target = os.path.realpath(path)
    return any(target in open_files(p.pid) for p in processes())


def commit_all(
    workspace: Path,
    message: str,
    trailers: Mapping[str, str],
    *,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Stage every change in the workspace and commit it with ``trailers``; return the sha.

    The commit is made even when nothing changed (``--allow-empty``): the trailer is the
    durable record that the step ran. Only the workspace is staged (``git add -A -- .``),
    so a workspace in a subdirectory of a larger repository does not sweep in the rest.
    ``extra_env`` marks the git processes (acode marks them with its session, so that a
    resume can stop a git its killed predecessor left running).
    """
    for key, value in trailers.items():
        _check_trailer(key, value)
    if not message.strip():
        raise UsageError(
            "commit message is empty", hint="give the commit step a message to commit with"
        )
    env = {**_identity_env(workspace), **(extra_env or {})}
    _git_ok(workspace, ["add", "--all", "--", "."], env=env)
    lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    full = f"{message.strip()}\n\n{lines}\n" if lines else f"{message.strip()}\n"
    # --cleanup=whitespace: a user's commit.cleanup=strip would eat lines starting with '#'.
    _git_ok(
        workspace,
        ["commit", "--quiet", "--allow-empty", "--cleanup=whitespace", "--message", full],
        env=env,
    )
    return _git_ok(workspace, ["rev-parse", "HEAD"]).strip()


def _check_trailer(key: str, value: str) -> None:
    if not _TRAILER_KEY.fullmatch(key):
        raise UsageError(
            f"git trailer key {key!r} is not a token of letters, digits and dashes",
            hint="use a key such as Acode-Step",
        )
    if "\n" in value or "\r" in value:
        raise UsageError(
            f"git trailer {key!r} has a value spanning several lines: {value!r}",
            hint="trailer values must fit on one line",
        )


def _identity_env(workspace: Path) -> dict[str, str]:
    """What acode's commit adds to the environment: a fallback identity where neither the
    repository nor the environment gives one (instead of writing to any git configuration)."""
    env: dict[str, str] = {}
    for field, role_var, fallback in (
        ("name", "NAME", FALLBACK_NAME),
        ("email", "EMAIL", FALLBACK_EMAIL),
    ):
        configured = _git(workspace, ["config", "--get", f"user.{field}"]).stdout.strip()
        # git itself falls back to $EMAIL before guessing: keep that choice of the user's.
        if configured or (field == "email" and os.environ.get("EMAIL")):
            continue
        for role in ("AUTHOR", "COMMITTER"):
            if f"GIT_{role}_{role_var}" not in os.environ:
                env[f"GIT_{role}_{role_var}"] = fallback
    return env


# -- snapshots of the work tree ("ghost commits") ------------------------------------------


@dataclass(frozen=True)
class SnapshotEntry:
    """A file of a snapshot or of the work tree: its git mode and blob id ("" when the
    work tree's file was not hashed)."""

    mode: str
    blob: str


def snapshot_ref(session_id: str, step_id: str, attempt: int) -> str:
    """The ref that keeps a step's snapshot: ``refs/acode/<session>/<step>-<attempt>``."""
    # git refuses '..' in a ref name. Step ids never contain '%', so escaping the first dot
    # of each pair keeps distinct steps on distinct refs.
    step = re.sub(r"\.(?=\.)", "%2E", step_id)
    ref = f"{SNAPSHOT_REF_ROOT}/{session_id}/{step}-{attempt}"
    _check_ref(ref)
    return ref


def snapshot_worktree(workspace: Path, ref: str) -> str:
    """Record the workspace's files as they are now in a commit kept at ``ref``; return it.

    The snapshot holds every file git would see in the workspace: tracked files with their
    current content and untracked files that are not ignored (``.agent/state`` never).
    Directories that are repositories of their own (submodules, nested clones) are left
    out. The parent is HEAD when there is one, so ``git diff HEAD <sha>`` reads naturally.
    """
    _check_ref(ref)
    prefix, head = _prefix_and_head(workspace)
    with Beneath(workspace) as files:
        entries = _worktree_entries(files, prefix)
    lines = b"".join(
        f"{entry.mode} {entry.blob}\t".encode() + os.fsencode(prefix + rel) + b"\0"
        for rel, entry in sorted(entries.items())
    )
    with tempfile.TemporaryDirectory(prefix="acode-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        _git_bytes(workspace, ["update-index", "--add", "-z", "--index-info"], env=env, stdin=lines)
        tree = _git_bytes(workspace, ["write-tree"], env=env).decode().strip()
    parent = ["-p", head] if head else []
    # acode's own identity, always: the snapshot is not the user's commit, and asking git
    # for the user's configuration would cost two more processes on every run step.
    identity = {
        f"GIT_{role}_{field}": value
        for role in ("AUTHOR", "COMMITTER")
        for field, value in (("NAME", FALLBACK_NAME), ("EMAIL", FALLBACK_EMAIL))
    }
    commit = _git_bytes(
        workspace,
        ["commit-tree", tree, *parent, "-m", SNAPSHOT_MESSAGE],
        env=identity,
    )
    sha = commit.decode().strip()
    _git_ok(workspace, ["update-ref", "-m", SNAPSHOT_MESSAGE, ref, sha])
    return sha


def worktree_files(tree: Beneath, hashed: Container[str]) -> dict[str, SnapshotEntry]:
    """The files git sees in the workspace now (as a snapshot would hold them), with
    the blob ids of those in ``hashed``; the others are listed, not read."""
    modes = _worktree_modes(tree)
    wanted = {rel: mode for rel, mode in modes.items() if rel in hashed}
    blobs = _hash_objects(tree, _prefix(tree.workspace), wanted, write=False)
    return {rel: SnapshotEntry(mode, blobs.get(rel, "")) for rel, mode in modes.items()}


def write_back(
    tree: Beneath,
    snapshot: Mapping[str, SnapshotEntry],
    rewrite: Iterable[str],
    remove: Iterable[str],
) -> None:
    """Delete ``remove`` (with the directories that leaves empty) and write ``rewrite``
    as ``snapshot`` holds them, each by its name in a directory held open."""
    for rel in remove:
        _remove(tree, rel)
    rewrite = list(rewrite)
    contents = _read_blobs(tree.workspace, {snapshot[rel].blob for rel in rewrite})
    for rel in rewrite:
        entry = snapshot[rel]
        _write_entry(tree, rel, entry.mode, contents[entry.blob])


def read_blob(workspace: Path, blob: str) -> bytes:
    """The content of one blob of a snapshot."""
    return _read_blobs(workspace, [blob])[blob]


def keep_backup(workspace: Path, ref: str) -> None:
    """Keep the work tree as it is at ``ref`` before a restore changes it. When that ref
    exists already, a restore interrupted before has made it, and the first backup is
    the one kept."""
    if not _has_ref(workspace, ref):
        snapshot_worktree(workspace, ref)


def commit_preview(workspace: Path) -> tuple[str, tuple[str, ...]]:
    """What :func:`commit_all` would record now: git's diff of it against HEAD, and the
    paths it changes.

    Everything is staged as the commit stages it, but into a copy of the user's index,
    which is left as it was. Blob ids are written in full (``--full-index``), so the text
    changes whenever any content does, binary files included: an approval bound to this
    text is bound to the commit's content. Options fix what a user's configuration could
    change (prefixes, colours, external diff programs), so that the same work tree always
    gives the same text.
    """
    index = Path(_git_ok(workspace, ["rev-parse", "--git-path", "index"]).strip())
    index = index if index.is_absolute() else workspace / index
    with tempfile.TemporaryDirectory(prefix="acode-index-") as scratch:
        copy = Path(scratch) / "index"
        with contextlib.suppress(FileNotFoundError):  # no index yet: a new repository
            shutil.copyfile(index, copy)
        env = {**os.environ, "GIT_INDEX_FILE": str(copy)}
        _git_bytes(workspace, ["add", "--all", "--", "."], env=env)
        diff = _git_bytes(workspace, [*_PLAIN_DIFF, "--full-index", "--find-renames"], env=env)
        names = _git_bytes(workspace, [*_PLAIN_DIFF, "--name-only", "-z"], env=env)
    files = tuple(os.fsdecode(name) for name in names.split(b"\0") if name)
    return diff.decode("utf-8", errors="backslashreplace"), files


# The staged changes against HEAD (an unborn HEAD: the empty tree), of the whole
# repository as a commit records it, whatever the user's diff settings.
_PLAIN_DIFF = (
    "diff",
    "--cached",
    "--no-relative",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--diff-algorithm=myers",
)


def drop_snapshot(workspace: Path, ref: str) -> None:
    """Delete one snapshot ref; its objects go with git's next garbage collection."""
    _check_ref(ref)
    _git_ok(workspace, ["update-ref", "-d", ref])


BACKUP_SUFFIX = "-before-rollback"


def prune_snapshots(workspace: Path, session_id: str, *, keep_backups: bool = False) -> int:
    """Delete the snapshot refs of a session; return how many there were.

    Call it once the session is over: a snapshot is only needed while its step may be
    found interrupted. ``keep_backups`` keeps the ``-before-rollback`` refs, which hold
    what a rollback overwrote: a person's work, theirs to delete. Outside a git work
    tree there is nothing to prune.
    """
    root = f"{SNAPSHOT_REF_ROOT}/{session_id}"
    _check_ref(root)
    if not is_work_tree(workspace):
        return 0
    refs = _git_ok(workspace, ["for-each-ref", "--format=%(refname)", root]).split()
    if keep_backups:
        refs = [ref for ref in refs if not ref.endswith(BACKUP_SUFFIX)]
    if refs:
        commands = "".join(f"delete {ref}\n" for ref in refs)
        _git_bytes(workspace, ["update-ref", "--stdin"], stdin=commands.encode())
    return len(refs)


def _has_ref(workspace: Path, ref: str) -> bool:
    _check_ref(ref)
    return _git(workspace, ["rev-parse", "--verify", "--quiet", ref]).returncode == 0


def _check_ref(ref: str) -> None:
    parts = ref.split("/")
    if (
        parts[:2] != SNAPSHOT_REF_ROOT.split("/")
        or len(parts) < 3
        or not all(_REF_PART.fullmatch(p) and not p.endswith((".lock", ".")) for p in parts[2:])
        or ".." in ref
    ):
        raise UsageError(
            f"snapshot ref {ref!r} is not a ref name under {SNAPSHOT_REF_ROOT}/ that git accepts",
            hint="name snapshots with snapshot_ref(session_id, step_id, attempt)",
        )


def _git_bytes(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> bytes:
    """Run git with raw bytes in and out (file names need not be UTF-8); raise on failure."""
    result = _run_bytes(workspace, args, env=env, stdin=stdin)
    if result.returncode != 0:
        _raise_failed(workspace, args, result)
    return result.stdout


def _run_bytes(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=workspace,
            env=child_environment(env),
            input=stdin,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise StepFailedError(
            f"cannot run git in {workspace}: {exc}",
            hint="install git and check that the workspace directory exists",
        ) from exc


def _raise_failed(
    workspace: Path, args: Sequence[str], result: subprocess.CompletedProcess[bytes]
) -> NoReturn:
    detail = result.stderr.decode(errors="replace").strip() or f"exit {result.returncode}"
    raise StepFailedError(
        f"git {args[0]} failed in {workspace}: {detail}",
        hint="fix the problem git reports (a lock file, permissions, disk space), then resume",
    )


def _is_state(rel: str) -> bool:
    # .agent/state ignores itself, but a user who once committed it must still never see a
    # restore write an old database over the live one.
    return rel.split("/")[:2] == _STATE_PARTS


def _worktree_modes(tree: Beneath) -> dict[str, str]:
    """The files git sees in the workspace now, with their git modes."""
    listing = _git_bytes(
        tree.workspace, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    )
    modes: dict[str, str] = {}
    for raw in listing.split(b"\0"):
        rel = os.fsdecode(raw)
        if rel and rel not in modes and not _is_state(rel):
            mode = _mode_of(tree, rel)
            if mode is not None:
                modes[rel] = mode
    return modes


def _mode_of(tree: Beneath, rel: str) -> str | None:
    *parents, name = rel.split("/")
    dir_fd = tree.directory(parents, create=False)
    try:
        if dir_fd is None:
            raise FileNotFoundError(rel)
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None  # a tracked file deleted from the work tree
    if stat.S_ISLNK(info.st_mode):
        return _MODE_LINK
    if stat.S_ISREG(info.st_mode):
        return _MODE_EXEC if info.st_mode & stat.S_IXUSR else _MODE_FILE
    return None  # a directory here is a repository of its own: not ours to snapshot


def _prefix(workspace: Path) -> str:
    """The workspace's path inside the repository: "" at the top, else "dir/"."""
    return os.fsdecode(_git_bytes(workspace, ["rev-parse", "--show-prefix"]).rstrip(b"\n"))


def _prefix_and_head(workspace: Path) -> tuple[str, str | None]:
    """:func:`_prefix` and HEAD's commit (None before the first commit), in one process."""
    args = ["rev-parse", "--show-prefix", "--verify", "--quiet", "HEAD^{commit}"]
    result = _run_bytes(workspace, args)
    lines = result.stdout.split(b"\n")
    # Exit 1 with the prefix printed is an unborn HEAD; anything else is a real failure.
    if result.returncode not in (0, 1) or len(lines) < 2:
        _raise_failed(workspace, args, result)
    head = lines[1].decode().strip() if result.returncode == 0 else None
    return os.fsdecode(lines[0]), head


def _worktree_entries(tree: Beneath, prefix: str) -> dict[str, SnapshotEntry]:
    modes = _worktree_modes(tree)
    blobs = _hash_objects(tree, prefix, modes, write=True)
    return {rel: SnapshotEntry(mode, blobs[rel]) for rel, mode in modes.items()}


def _hash_objects(
    tree: Beneath, prefix: str, modes: Mapping[str, str], *, write: bool
) -> dict[str, str]:
    """The blob id of each path's bytes as they are on disk, unfiltered."""
    workspace = tree.workspace
    command = ["hash-object", "--no-filters", *(["-w"] if write else [])]
    # --stdin-paths reads lines (and unquotes a leading '"') and follows symlinks: names it
    # would misread, and links, whose blob is the link's target, go one by one.
    batch = [rel for rel, mode in modes.items() if mode != _MODE_LINK and _line_safe(rel)]
    blobs: dict[str, str] = {}
    if batch:
        # Unlike arguments, these names are read relative to the top of the work tree.
        names = b"".join(os.fsencode(prefix + rel) + b"\n" for rel in batch)
        out = _git_bytes(workspace, [*command, "--stdin-paths"], stdin=names)
        blobs.update(zip(batch, out.decode().split(), strict=True))
    for rel, mode in modes.items():
        if rel in blobs:
            continue
        if mode == _MODE_LINK:
            target = _read_link(tree, rel)
            out = _git_bytes(workspace, [*command, "--stdin"], stdin=target)
        else:
            out = _git_bytes(workspace, [*command, "--", rel])
        blobs[rel] = out.decode().strip()
    return blobs


def _read_link(tree: Beneath, rel: str) -> bytes:
    *parents, name = rel.split("/")
    dir_fd = tree.directory(parents, create=False)
    if dir_fd is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), rel)
    return os.readlink(os.fsencode(name), dir_fd=dir_fd)


def _line_safe(rel: str) -> bool:
    return "\n" not in rel and "\r" not in rel and not rel.startswith('"')


def snapshot_files(workspace: Path, sha: str) -> dict[str, SnapshotEntry]:
    """The files of snapshot ``sha``, relative to the workspace (``.agent/state`` never)."""
    if _git(workspace, ["cat-file", "-e", f"{sha}^{{commit}}"]).returncode != 0:
        raise StepFailedError(
            f"the work tree snapshot {sha} is not in the repository at {workspace} "
            "(its ref was deleted and git collected it, or the repository was replaced)",
            hint=_RESTORE_HINT,
        )
    # ls-tree run in the workspace lists only its part of the tree, relative to it.
    listing = _git_bytes(workspace, ["ls-tree", "-r", "-z", sha])
    entries: dict[str, SnapshotEntry] = {}
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, raw = record.partition(b"\t")
        mode, kind, blob = meta.decode().split()
        rel = os.fsdecode(raw)
        if kind == "blob" and not _is_state(rel):
            entries[rel] = SnapshotEntry(mode, blob)
    return entries


def _read_blobs(workspace: Path, shas: Iterable[str]) -> dict[str, bytes]:
    wanted = sorted(shas)
    if not wanted:
        return {}
    out = _git_bytes(
        workspace, ["cat-file", "--batch"], stdin="".join(f"{s}\n" for s in wanted).encode()
    )
    blobs: dict[str, bytes] = {}
    pos = 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split()
        if len(header) != 3:
            raise StepFailedError(
                f"object {sha} of a work tree snapshot is missing from the repository at "
                f"{workspace}",
                hint=_RESTORE_HINT,
            )
        size = int(header[2])
        blobs[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1  # the content is followed by a newline
    return blobs


def _remove(tree: Beneath, rel: str) -> None:
    parts = rel.split("/")
    dir_fd = tree.directory(parts[:-1], create=False)
    if dir_fd is None:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(parts[-1], dir_fd=dir_fd)
    # Directories the deletion empties go too, as git does: a command run again that
    # creates its output directory must not find it already there.
    for depth in range(len(parts) - 1, 0, -1):
        parent = tree.directory(parts[: depth - 1], create=False)
        assert parent is not None  # on the way to the file just removed
        try:
            os.rmdir(parts[depth - 1], dir_fd=parent)
        except OSError:
            break
        tree.forget(parts[:depth])


def _write_entry(tree: Beneath, rel: str, mode: str, data: bytes) -> None:
    *parents, name = rel.split("/")
    # A parent that is now a file or a symlink (an ignored one, so not removed above)
    # must give way, or the write would fail or land outside the workspace.
    dir_fd = tree.directory(parents, create=True, replace=True)
    assert dir_fd is not None  # create=True makes it
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            tree.forget((*parents, name))
            shutil.rmtree(name, dir_fd=dir_fd)
    if mode == _MODE_LINK:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        os.symlink(os.fsdecode(data), name, dir_fd=dir_fd)
        return
    write_at(dir_fd, name, data, executable=mode == _MODE_EXEC)
