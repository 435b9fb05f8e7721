"""A history cut short locally, which its remote mirror holds whole: the resume, which
pushes what waits and asks the remote for its newest event before it writes anything,
refuses it (tests/security/test_truncation.py: what the workspace itself knows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acode.system.workspace import StatePaths
from tests.cli.conftest import Background, Cli, plan_yaml
from tests.support.attacker import Attacker
from tests.sync.conftest import Mirror


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background, mirror: Mirror) -> Cli:
    return Cli(workspace, {**cli_env, "ACODE_SYNC_DSN": mirror.dsn}, background)


def test_a_history_cut_short_is_refused_by_what_the_remote_holds(
    acode: Cli, mirror: Mirror
) -> None:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Mirrored",
            "{id: one, run: echo one >> log.txt, paths: [log.txt]}",
            "{id: two, run: echo two >> log.txt, paths: [log.txt]}",
            "{id: ok, approve: Go on?}",
        ),
    )
    acode("run", "plan.yml", expect=20)
    session = acode.only_session()["id"]
    acode("sync", "--wait")
    newest = mirror.count(session)
    attacker = Attacker(acode.workspace)
    sid = attacker.sid(session)
    keep = attacker.rows(
        "SELECT seq FROM events WHERE sid = ? AND signature IS NOT NULL ORDER BY seq DESC",
        sid,
    )[3][0]
    attacker.sql("DELETE FROM events WHERE sid = ? AND seq > ?", sid, keep)
    attacker.sql("DELETE FROM steps WHERE sid = ? AND event_seq > ?", sid, keep)
    attacker.sql(
        "UPDATE sessions SET state = (SELECT json_extract(payload, '$.to') FROM events"
        " WHERE sid = ?1 AND type = 'state_changed' ORDER BY seq DESC LIMIT 1) WHERE sid = ?1",
        sid,
    )
    # What the workspace knew of the later events goes too.
    (StatePaths(acode.workspace).session_dir(session) / "progress.md").unlink()

    refused = acode("resume", session, expect=1)
    assert "ACODE-CKPT-002" in refused.flat_err, refused.describe()
    assert f"its history ends at event {keep}, but the remote mirror knows event {newest}" in (
        refused.flat_err
    )
    assert (acode.workspace / "log.txt").read_text() == "one\ntwo\n"  # nothing ran again
