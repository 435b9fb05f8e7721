"""``acode doctor``: what a person checks when something is off, each check with its
fix. Looking never changes anything: the database is opened read-only, the key file
and the state directory are only examined, a missing one is reported, never created."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from acode.domain.config import ENGINE_CLIS, AcodeConfig, ModelSettings
from acode.errors import AcodeError
from acode.security.child_env import child_environment

__all__ = ["Check", "ModelProbe", "Status", "diagnose", "failed"]

MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python
MIN_SQLITE = (3, 24, 0)  # UPSERT (INSERT ... ON CONFLICT DO UPDATE), used by the store
VERSION_TIMEOUT_S = 5.0  # an engine CLI's --version


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # worth knowing; does not fail the doctor
    FAIL = "fail"
    SKIP = "skip"  # nothing to check here (not configured, not installed, not yet made)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None  # a command that works when pasted, where there is one


class InStore(NamedTuple):
    """The workspace's sessions in a PostgreSQL store: where (no password), and what
    pruning them all would free there (None: not known, the store did not answer)."""

    shown: str
    bytes: int | None


_UNKNOWN = InStore("the PostgreSQL store", None)  # one the database check failed on


# The model server's check, given by the caller: the resume's probe lives above this
# layer. It returns None when the server answers with the model, else (problem, fix).
ModelProbe = Callable[[AcodeConfig], tuple[str, str] | None]


def failed(checks: list[Check]) -> bool:
    return any(c.status is Status.FAIL for c in checks)


def diagnose(workspace: Path, model_probe: ModelProbe) -> list[Check]:
    from acode.system.workspace import StatePaths

    paths = StatePaths(workspace)
    checks = [python_check(), sqlite_check(), key_check(paths.db.exists())]
    checks += state_dir_checks(paths.state_dir, paths.locks)
    stored = _store_check(workspace)
    in_store = None
    if stored is None:
        database, backlog = database_check(paths.db)
    else:
        (database, in_store), backlog = stored, None
    checks += [database, git_check(workspace)]
    config, loaded = config_check(workspace)
    checks.append(config)
    if loaded is None:
        skipped = "the configuration could not be read"
        checks += [Check(n, Status.SKIP, skipped) for n in ("model", "remote")]
    else:
        checks += [model_check(loaded, model_probe), *remote_checks(loaded, backlog)]
        checks += handoff_checks(workspace, loaded)
        checks += engine_checks(loaded)
    limit = loaded.retention.max_state_bytes if loaded is not None else None
    checks.append(size_check(paths.state_dir, limit, in_store))
    return checks


def _version(parts: tuple[int, ...]) -> str:
    return ".".join(map(str, parts))


def python_check() -> Check:
    return _version_check(
        "python",
        sys.version_info[:3],
        MIN_PYTHON,
        f"install Python {_version(MIN_PYTHON)}+, then: python3 -m pip install acode",
    )


def sqlite_check() -> Check:
    return _version_check(
        "sqlite",
        sqlite3.sqlite_version_info,
        MIN_SQLITE,
        "use a Python built with a newer SQLite (python.org and distribution builds are)",
    )


def _version_check(name: str, found: tuple[int, ...], minimum: tuple[int, ...], fix: str) -> Check:
    shown = _version(tuple(found))
    if tuple(found)[: len(minimum)] < minimum:
        return Check(name, Status.FAIL, f"{shown}; acode needs {_version(minimum)} or newer", fix)
    return Check(name, Status.OK, f"{shown} (needs {_version(minimum)}+)")


def key_check(have_sessions: bool) -> Check:
    from acode.security.signing import SECRET_ENV, key_path

    if os.environ.get(SECRET_ENV):
        return Check("key", Status.OK, f"from {SECRET_ENV}")
    path = key_path()
    quoted = shlex.quote(str(path))
    try:
        st = path.lstat()
    except FileNotFoundError:
        if have_sessions:
            return Check(
                "key",
                Status.FAIL,
                f"no key file {path}: the sessions here cannot be verified",
                f"restore the key file to {quoted}, or set {SECRET_ENV} to the key they used",
            )
        return Check("key", Status.OK, f"no key file yet: acode creates {path} at its first run")
    except OSError as exc:
        return Check(
            "key",
            Status.FAIL,
            f"cannot examine {path}: {exc.strerror or exc}",
            f"ls -ld {shlex.quote(str(path.parent))}   # its directory must be yours",
        )
    if not stat.S_ISREG(st.st_mode):
        return Check(
            "key",
            Status.FAIL,
            f"{path} is not a regular file",
            f"check who made it, then: mv {quoted} {quoted}.moved",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Check(
            "key",
            Status.FAIL,
            f"{path} is readable by others (mode {mode:04o})",
            f"chmod 600 {quoted}",
        )
    if st.st_size < 16:
        return Check(
            "key",
            Status.FAIL,
            f"{path} is too short ({st.st_size} bytes)",
            f"restore the key file, or set {SECRET_ENV}; a new key cannot verify old sessions",
        )
    return Check("key", Status.OK, f"{path} (mode {mode:04o})")


def state_dir_checks(state_dir: Path, locks: Path) -> list[Check]:
    from acode.system.private_dirs import open_private_dir

    checks = []
    for name, path in (("state dir", state_dir), ("locks dir", locks)):
        try:
            fd = open_private_dir(path, None, what=name.split()[0])
        except AcodeError as exc:
            checks.append(Check(name, Status.FAIL, exc.message, exc.hint))
            continue
        if fd is None:
            checks.append(Check(name, Status.SKIP, f"{path}: not made yet"))
            continue
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        os.close(fd)
        checks.append(Check(name, Status.OK, f"{path} (mode {mode:04o})"))
    return checks


def database_check(db: Path) -> tuple[Check, int | None]:
    """The database's check, and how many of its events no remote has received."""
    from acode.store.base import database_health

    if not db.exists():
        return Check("database", Status.OK, "no sessions yet"), None
    moved = f"mv {shlex.quote(str(db))} {shlex.quote(str(db) + '.broken')}"
    try:
        health = database_health(db)
    except sqlite3.Error as exc:
        return Check(
            "database",
            Status.FAIL,
            f"{db} cannot be read: {exc}",
            f"{moved}   # acode starts afresh; `sqlite3 FILE .recover` may save what it held",
        ), None
    if health.problems:
        shown = "; ".join(health.problems[:3])
        return Check(
            "database",
            Status.FAIL,
            f"{db} is damaged: {shown}",
            f"sqlite3 {shlex.quote(str(db))} .recover | sqlite3 {shlex.quote(str(db) + '.new')}",
        ), None
    if health.schema > health.latest:
        return Check(
            "database",
            Status.FAIL,
            f"schema version {health.schema}, newer than this acode's {health.latest}",
            "python3 -m pip install -U acode",
        ), None
    older = " (upgraded at its next opening)" if health.schema < health.latest else ""
    return Check(
        "database", Status.OK, f"quick_check ok, schema version {health.schema}{older}"
    ), health.backlog


def _store_check(workspace: Path) -> tuple[Check, InStore] | None:
    """The PostgreSQL store's check, where ``store.url`` names one, and what the
    workspace holds there; None: the workspace's sessions are in its SQLite file (or its
    configuration cannot be read, which the config check reports)."""
    from acode.engine.store_choice import scoped_store_url

    try:
        url = scoped_store_url(workspace)
    except AcodeError:
        return None
    if url is None:
        return None
    return store_check(url)


def store_check(url: str) -> tuple[Check, InStore]:
    """The check of the store at ``url``, narrowed to the workspace's sessions."""
    from acode.store.base import store_health

    try:
        health = store_health(url)
    except AcodeError as exc:
        return Check("database", Status.FAIL, exc.message, exc.hint), _UNKNOWN
    held = InStore(health.shown, health.bytes)
    if health.schema > health.latest:
        return Check(
            "database",
            Status.FAIL,
            f"{health.shown}: schema version {health.schema}, newer than this acode's "
            f"{health.latest}",
            "python3 -m pip install -U acode",
        ), _UNKNOWN
    if health.schema == 0:
        return Check("database", Status.OK, f"{health.shown}: no sessions yet"), held
    older = " (upgraded at its next opening)" if health.schema < health.latest else ""
    count = f"{health.sessions} session{'s' if health.sessions != 1 else ''} of this workspace"
    return Check(
        "database", Status.OK, f"{health.shown}: schema version {health.schema}{older}, {count}"
    ), held


def git_check(workspace: Path) -> Check:
    import subprocess

    git = shutil.which("git")
    if git is None:
        return Check(
            "git",
            Status.WARN,
            "git is not on PATH: plans with run or commit steps need it",
            "install git (e.g. sudo apt install git)",
        )
    try:
        done = subprocess.run(
            [git, "-C", str(workspace), "rev-parse", "--is-inside-work-tree"],
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("git", Status.WARN, f"{git} rev-parse did not answer: {exc}")
    if done.returncode != 0 or done.stdout.strip() != "true":
        return Check(
            "git",
            Status.WARN,
            f"{workspace} is not a git work tree",
            f"git -C {shlex.quote(str(workspace))} init",
        )
    return Check("git", Status.OK, f"{workspace} is a git work tree")


def config_check(workspace: Path) -> tuple[Check, AcodeConfig | None]:
    from acode.engine.config import CONFIG_RELATIVE, load_config
    from acode.engine.lifecycle import refuse_mirror_of_postgres

    try:
        config = load_config(workspace)
    except AcodeError as exc:
        return Check("config", Status.FAIL, exc.message, exc.hint), None
    try:
        refuse_mirror_of_postgres(config)
    except AcodeError as exc:  # read, and refused by every command that runs a session
        return Check("config", Status.FAIL, exc.message, exc.hint), config
    read = "read" if (workspace / CONFIG_RELATIVE).exists() else "absent: the defaults apply"
    written = _password_in_file(config)
    if written is not None:
        key, variable = written
        return Check(
            "config",
            Status.WARN,
            f"{CONFIG_RELATIVE} read; its {key} holds a password, in a file of the workspace "
            "(often committed)",
            f"move the password to ~/.pgpass (or give the whole URL as {variable}), then "
            f"remove it from {CONFIG_RELATIVE}",
        ), config
    return Check("config", Status.OK, f"{CONFIG_RELATIVE} {read}"), config


def _password_in_file(config: AcodeConfig) -> tuple[str, str] | None:
    """The key of the config file whose PostgreSQL URL holds a password, and the
    variable that would give it instead; a variable that is set wins over the file."""
    import re
    from urllib.parse import urlsplit

    for key, variable, url in (
        ("store.url", "ACODE_STORE_URL", config.store.url),
        ("sync.remote", "ACODE_SYNC_DSN", config.sync.remote),
    ):
        if url is None or os.environ.get(variable):
            continue
        try:
            in_url = urlsplit(url).password if "://" in url else None
        except ValueError:  # reported by the commands that connect
            in_url = None
        if in_url or re.search(r"(?:^|[\s?&])password=", url):
            return key, variable
    return None


def model_check(config: AcodeConfig, probe: ModelProbe) -> Check:
    settings = config.model
    if settings == ModelSettings():
        return Check("model", Status.SKIP, "no model configured (model: in .agent/config.yml)")
    outcome = probe(config)
    if outcome is not None:
        problem, fix = outcome
        return Check("model", Status.FAIL, problem, fix)
    return Check("model", Status.OK, f"{settings.name} at {settings.base_url}")


def remote_checks(config: AcodeConfig, backlog: int | None) -> list[Check]:
    dsn = config.sync.remote
    if config.store.url is not None:
        # The two exclude each other: a mirror is nothing to set up here.
        return [
            Check("remote", Status.SKIP, "none needed: the sessions are in the PostgreSQL store")
        ]
    if dsn is None:
        return [Check("remote", Status.SKIP, "no remote configured (sync.remote)")]
    from acode.sync.remote import connect_remote

    timeout = config.resume.validation_timeout_seconds
    try:
        connect_remote(dsn, connect_timeout=timeout, statement_timeout=timeout).close()
    except AcodeError as exc:
        remote = Check("remote", Status.FAIL, exc.message, exc.hint)
    else:
        from acode.sync.dsn import describe_remote

        remote = Check("remote", Status.OK, f"{describe_remote(dsn)} answers")
    if not backlog:
        pending = Check("sync backlog", Status.OK, "every event is on the remote")
    else:
        pending = Check(
            "sync backlog", Status.WARN, f"{backlog} events wait for the remote", "acode sync"
        )
    return [remote, pending]


def handoff_checks(workspace: Path, config: AcodeConfig) -> list[Check]:
    """Only with ``handoff.remote``: the git remote it names exists here (looked up, not
    reached), and with a PostgreSQL store, the workspace has a name its clones share."""
    remote = config.handoff.remote
    if remote is None:
        return []
    from acode.system.git_command import run_git

    found = run_git(workspace, ["remote", "get-url", remote])
    if found.returncode != 0:
        return [
            Check(
                "handoff",
                Status.FAIL,
                f"no git remote named {remote} in {workspace}: the work trees cannot be pushed",
                f"git remote add {shlex.quote(remote)} URL   # the repository's URL",
            )
        ]
    from acode.domain.config import mask_credentials

    detail = f"{remote} is {mask_credentials(found.stdout.strip())}"
    if config.store.url is None:
        return [Check("handoff", Status.OK, detail)]
    if config.store.workspace is None:
        return [
            Check(
                "handoff",
                Status.WARN,
                f"{detail}; no store.workspace: a clone in another directory sees none of "
                "this workspace's sessions",
                "set store.workspace in .agent/config.yml to a name every clone shares, "
                "such as the repository's (docs/fleet.md)",
            )
        ]
    return [
        Check(
            "handoff", Status.OK, f"{detail}; the clones share workspace {config.store.workspace}"
        )
    ]


def engine_checks(config: AcodeConfig) -> list[Check]:
    # The configured ones: the defaults, and "command" once it is given one.
    return [_engine_check(name, config) for name in ENGINE_CLIS if name in config.engines]


def _engine_check(name: str, config: AcodeConfig) -> Check:
    import subprocess

    command = config.engines[name].command
    found = shutil.which(command)
    if found is None:
        return Check(f"engine {name}", Status.SKIP, f"{command!r} not found on PATH")
    try:
        done = subprocess.run(
            [found, "--version"],
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Check(
            f"engine {name}",
            Status.WARN,
            f"{found} --version did not answer in {VERSION_TIMEOUT_S:.0f} s",
        )
    except OSError as exc:
        return Check(f"engine {name}", Status.WARN, f"{found}: {exc.strerror or exc}")
    lines = (done.stdout or done.stderr).strip().splitlines()
    version = lines[0] if lines else "no version printed"
    if done.returncode != 0:
        return Check(f"engine {name}", Status.WARN, f"{found} --version failed: {version}")
    return Check(f"engine {name}", Status.OK, f"{version} ({found})")


def size_check(state_dir: Path, limit: int | None = None, in_store: InStore | None = None) -> Check:
    """The state directory's size, and the part retention weighs (the database and the
    progress files) against ``retention.max_state_bytes``. ``in_store``: the sessions are
    in PostgreSQL, where the database part is what pruning them all would free there
    (docs/retention.md), not a file here."""
    from acode.system.workspace import StatePaths

    if not state_dir.is_dir() and in_store is None:
        return Check("state size", Status.SKIP, "no state yet")
    total = sum(_sizes(state_dir))
    detail = f"{total:,} bytes in {state_dir}"
    held, stored = "the database and progress files hold", 0
    if in_store is not None:
        if in_store.bytes is None:
            unknown = f"{detail}; the sessions' size in {in_store.shown} is not known"
            if limit is None:
                return Check("state size", Status.OK, unknown)
            return Check(
                "state size",
                Status.WARN,
                f"{unknown}: not weighed against retention.max_state_bytes ({limit:,})",
            )
        detail += f"; this workspace's sessions hold {in_store.bytes:,} in {in_store.shown}"
        held, stored = "they and the progress files hold", in_store.bytes
    if limit is None:
        return Check("state size", Status.OK, f"{detail}; no retention.max_state_bytes")
    weighed = StatePaths(state_dir.parent.parent).state_bytes() + stored
    if weighed > limit:
        return Check(
            "state size",
            Status.FAIL,
            f"{detail}; {held} {weighed:,}, over retention.max_state_bytes ({limit:,})",
            f"acode session prune --dry-run -w {shlex.quote(str(state_dir.parent.parent))}",
        )
    return Check(
        "state size",
        Status.OK,
        f"{detail}; {held} {weighed:,}, within retention.max_state_bytes ({limit:,})",
    )


def _sizes(top: Path) -> Iterator[int]:
    for root, _dirs, files in os.walk(top):
        for name in files:
            try:
                yield os.lstat(os.path.join(root, name)).st_size
            except OSError:  # gone while counting
                continue
