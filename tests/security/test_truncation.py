"""A history cut short: its newest events deleted, the session rolled back to an earlier
state that every check of the database itself finds valid. It is refused wherever a
later position of it is known: its progress file, its work-session document (here), the
remote mirror (tests/sync/test_truncation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import acode
from acode.system.workspace import StatePaths
from tests.cli.conftest import Background, Cli, plan_yaml
from tests.support.attacker import Attacker


@pytest.fixture
def cli(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    return Cli(workspace, cli_env, background)


def _cut_to_checkpoint(ws: Path, session: str, back: int) -> int:
    """Delete every event after the ``back``-th newest checkpoint: the newest event left."""
    attacker = Attacker(ws)
    sid = attacker.sid(session)
    seqs = [
        r[0]
        for r in attacker.rows(
            "SELECT seq FROM events WHERE sid = ? AND signature IS NOT NULL ORDER BY seq DESC",
            sid,
        )
    ]
    keep = seqs[back]
    attacker.sql("DELETE FROM events WHERE sid = ? AND seq > ?", sid, keep)
    attacker.sql("DELETE FROM steps WHERE sid = ? AND event_seq > ?", sid, keep)
    # The sessions row made to agree, as a careful attacker would.
    (state,) = attacker.rows(
        "SELECT json_extract(payload, '$.to') FROM events WHERE sid = ?"
        " AND type = 'state_changed' ORDER BY seq DESC LIMIT 1",
        sid,
    )[0]
    attacker.sql("UPDATE sessions SET state = ? WHERE sid = ?", state, sid)
    return int(keep)


def test_a_history_cut_short_is_refused_by_what_its_progress_file_knows(cli: Cli) -> None:
    cli.write(
        "plan.yml",
        plan_yaml(
            "Cut",
            "{id: one, run: echo one >> log.txt, paths: [log.txt]}",
            "{id: two, run: echo two >> log.txt, paths: [log.txt]}",
            "{id: ok, approve: Go on?}",
        ),
    )
    cli("run", "plan.yml", expect=20)
    session = str(cli.sessions()[0]["id"])
    kept = _cut_to_checkpoint(cli.workspace, session, 3)

    refused = cli("resume", session, expect=1)
    assert "ACODE-CKPT-002" in refused.flat_err, refused.describe()
    assert f"its history ends at event {kept}, but its progress file knows event" in (
        refused.flat_err
    )
    assert (cli.workspace / "log.txt").read_text() == "one\ntwo\n"  # nothing ran again


def test_a_work_session_cut_short_is_refused_by_its_document(cli: Cli) -> None:
    cli("settings", "set", "ai_stacking_mode", "handsoff")  # acode records, nothing runs
    cli("task", "add", "Implement feature X")
    started = cli("work", "task", "task-001", "--json").json()
    cookie, wsession = started["cookie"], started["id"]
    for message in ("Found validate", "Found sanitize"):
        cli("wsession", "breadcrumb", "add", "--cookie", cookie, "--message", message)
    attacker = Attacker(cli.workspace)
    sid = attacker.sid(wsession)
    (last,) = attacker.rows("SELECT max(seq) FROM events WHERE sid = ?", sid)[0]
    attacker.sql("DELETE FROM events WHERE sid = ? AND seq = ?", sid, last)

    refused = cli("work", "show", wsession, expect=1)
    assert "ACODE-CKPT-002" in refused.flat_err, refused.describe()
    assert "breadcrumbs its history does not hold" in refused.flat_err


def test_a_library_session_cut_short_is_refused_by_its_progress_file(workspace: Path) -> None:
    s = acode.open_session("library", workspace=workspace)
    for i in range(5):
        s.step(f"s{i}", lambda ctx: ctx.position)
    s.pause("break")
    s.close()
    assert (StatePaths(workspace).session_dir(s.id) / "progress.md").exists()
    _cut_to_checkpoint(workspace, s.id, 2)
    with pytest.raises(acode.AcodeError, match="newest events were cut off") as refused:
        acode.resume_session(s.id, workspace)
    assert refused.value.code.value == "ACODE-CKPT-002"
