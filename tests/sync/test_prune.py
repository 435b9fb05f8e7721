"""A prune with a remote mirror (a real PostgreSQL): a session whose events the remote
has not received is kept until `acode sync` pushes them; a pruned session the remote
still holds is named as pruned, never taken for a history cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml
from tests.sync.conftest import Mirror


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background, mirror: Mirror) -> Cli:
    return Cli(workspace, {**cli_env, "ACODE_SYNC_DSN": mirror.dsn}, background)


def test_an_unsynced_session_stays_until_the_remote_has_it(acode: Cli, mirror: Mirror) -> None:
    acode.write("plan.yml", plan_yaml("Mirrored", "{id: w, write: a.txt, content: hi}"))
    mirror.proxy.down()
    acode("run", "plan.yml")
    session = acode.only_session()["id"]
    assert mirror.count(session) == 0

    kept = acode("session", "prune", "--state", "completed", "--yes", "--json").json()
    assert kept["removed"] == []
    (skipped,) = kept["skipped"]
    assert skipped["id"] == session
    assert "acode sync" in skipped["reason"]
    assert acode.only_session()["id"] == session

    mirror.proxy.up()
    acode("sync", "--wait")
    total = mirror.count(session)
    assert total > 0
    gone = acode("session", "prune", "--state", "completed", "--yes", "--json").json()
    assert [r["id"] for r in gone["removed"]] == [session]
    assert acode.sessions() == []

    # The remote holds the whole history; the workspace's record says it was pruned.
    said = acode("resume", session, expect=14)
    assert "ACODE-SESSION-003" in said.flat_err, said.describe()
    assert "ACODE-CKPT" not in said.flat_err
    assert mirror.count(session) == total  # a prune never touches the remote
