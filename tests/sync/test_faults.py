"""A remote that cannot be used, for each reason a person meets: the session is not
touched, nothing waits longer than the time-out, and the reason is clear."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import acode
from acode.domain.config import AcodeConfig, SyncSettings
from acode.store.base import open_store
from acode.sync.remote import CONNECT_TIMEOUT_S
from tests.cli.conftest import ACODE, make_env
from tests.support.postgres import PASSWORD_ROLE
from tests.sync.conftest import Mirror, local_events


def _wrong_password(mirror: Mirror) -> str:
    import psycopg

    role, right = PASSWORD_ROLE
    if not mirror.pg.embedded:  # a given server: the role may have to be made first
        mirror.execute(
            f"DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD '{right}';"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    dsn = mirror.pg.url_via(mirror.proxy.port, mirror.dbname, user=role, password="wrong")
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.OperationalError:
        return dsn
    pytest.fail(
        f"the test server lets role {role} in with a wrong password: this test needs "
        "password authentication for it (see docs/testing.md)",
        pytrace=False,
    )


def _unknown_host(mirror: Mirror) -> str:
    return f"postgresql://postgres@nohost.invalid:5432/{mirror.dbname}"


def _refused_port(mirror: Mirror) -> str:
    mirror.proxy.down()
    return mirror.dsn


def _no_answer(mirror: Mirror) -> str:
    mirror.proxy.set_mode("blackhole")
    return mirror.dsn


FAULTS: dict[str, tuple[Callable[[Mirror], str], str]] = {
    "wrong-password": (
        _wrong_password,
        r"password authentication failed for user acode_pw \(127\.0\.0\.1:\d+\)",
    ),
    "unknown-host": (_unknown_host, r"unknown host nohost\.invalid"),
    "refused-port": (_refused_port, r"Connection refused \(127\.0\.0\.1:\d+\)"),
    "no-answer": (_no_answer, rf"no answer within {CONNECT_TIMEOUT_S} s"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_session_runs_unaffected_and_keeps_the_reason(
    workspace: Path, secret: None, mirror: Mirror, fault: str
) -> None:
    make, reason = FAULTS[fault]
    config = AcodeConfig(sync=SyncSettings(remote=make(mirror)))
    started = time.monotonic()
    with acode.open_session("unaffected", workspace, config) as s:
        for i in range(5):
            assert s.step(f"s{i}", lambda ctx: ctx.position) == i
        session_id = s.id
    elapsed = time.monotonic() - started

    assert elapsed < 3.0  # five durable steps, then at most the grace period
    assert len(local_events(workspace, session_id)) == 8  # all of it, locally
    if fault == "no-answer":
        return  # its attempt waits out the connect time-out, past the grace period
    store = open_store(workspace / ".agent" / "state" / "acode.db")
    try:
        state = store.sync_state(store.session(session_id).sid)
    finally:
        store.close()
    assert state.last_error is not None
    assert re.fullmatch(reason, state.last_error), state.last_error
    assert "wrong" not in state.last_error  # the password


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_acode_sync_gives_the_reason_within_the_time_out(
    workspace: Path,
    secret: None,
    mirror: Mirror,
    fault: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with acode.open_session("recorded offline", workspace) as s:
        s.step("a", lambda ctx: 1)
    make, reason = FAULTS[fault]
    env = {**make_env(tmp_path_factory.mktemp("cfg")), "ACODE_SYNC_DSN": make(mirror)}

    started = time.monotonic()
    done = subprocess.run(
        [ACODE, "sync", "--timeout", "10", "-w", str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    elapsed = time.monotonic() - started

    assert done.returncode == 1, done.stderr
    assert elapsed < CONNECT_TIMEOUT_S + 3.0
    assert re.search(r"^Sync: DEGRADED - 4 events pending \(1 session\) for ", done.stderr, re.M)
    assert re.search(rf"^  Reason: {reason}$", done.stderr, re.M), done.stderr
    assert "Traceback" not in done.stderr
    assert "wrong" not in done.stderr
