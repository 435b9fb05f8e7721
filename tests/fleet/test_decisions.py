"""What a worker does with an item it claims, and how a repository URL is checked and
shown: pure decisions, no server."""

from __future__ import annotations

import string
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acode.domain.config import parse_config
from acode.engine.config import load_config
from acode.errors import ConfigError, UsageError
from acode.fleet.queue import QueueItem, fleet_url
from acode.fleet.reclaim import Action, decide_claim
from acode.fleet.repo import check_repo_url, mask_url, result_branch

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SID = "01a21bd3-11e9-75a1-8e7a-c9daa4b70661"


def _item(**fields: object) -> QueueItem:
    base: dict[str, object] = dict.fromkeys(QueueItem._fields)
    base.update(
        id=1,
        queue="default",
        title="t",
        plan="title: t",
        repo_url="/r",
        state="running",
        attempts=2,
        epoch=2,
        outside_effects=False,
        created_at=NOW,
        updated_at=NOW,
    )
    base.update(fields)
    return QueueItem(**base)  # type: ignore[arg-type]


def test_an_item_without_a_session_starts(tmp_path: Path) -> None:
    assert decide_claim(_item(), "h").action is Action.START


def test_a_session_whose_workspace_is_here_is_resumed_there(tmp_path: Path) -> None:
    item = _item(session_id=SID, session_host="h", session_workspace=str(tmp_path))

    decision = decide_claim(item, "h")

    assert (decision.action, decision.workspace) == (Action.RESUME, tmp_path)


@pytest.mark.parametrize("where", ["other-host", "gone-folder"])
def test_a_session_out_of_reach_starts_over_only_without_outside_effects(
    tmp_path: Path, where: str
) -> None:
    host = "elsewhere" if where == "other-host" else "h"
    folder = tmp_path if where == "other-host" else tmp_path / "gone"
    quiet = _item(session_id=SID, session_host=host, session_workspace=str(folder))
    loud = quiet._replace(outside_effects=True)

    restart, fail = decide_claim(quiet, "h"), decide_claim(loud, "h")

    assert restart.action is Action.RESTART
    assert fail.action is Action.FAIL
    assert "shared session store" in fail.reason
    shared = decide_claim(loud, "h", shared_store=True)
    assert (shared.action, shared.workspace) == (Action.RESUME, None)  # in a fresh clone


def test_with_a_shared_store_a_workspace_here_is_still_resumed_in_place(tmp_path: Path) -> None:
    item = _item(session_id=SID, session_host="h", session_workspace=str(tmp_path))

    decision = decide_claim(item, "h", shared_store=True)

    assert (decision.action, decision.workspace) == (Action.RESUME, tmp_path)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@host/r.git", "https://***@host/r.git"),
        ("https://ghp_token@host/r.git", "https://***@host/r.git"),
        ("ssh://git@host:22/r.git", "ssh://***@host:22/r.git"),
        ("https://host/r.git", "https://host/r.git"),
    ],
)
def test_credentials_are_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@given(st.text(alphabet=string.ascii_letters + string.digits + "-_.~", min_size=6))
def test_a_secret_in_the_user_part_never_shows(secret: str) -> None:
    assert secret not in mask_url(f"https://{secret}:{secret}@h/r.git")
    assert secret not in mask_url(f"https://{secret}@h/r.git")


def test_the_queue_url_and_lease_are_settings(tmp_path: Path) -> None:
    (tmp_path / ".agent").mkdir()
    (tmp_path / ".agent" / "config.yml").write_text(
        "sync: {remote: postgresql://m/db}\nfleet: {lease_seconds: 2}\n"
    )

    mirror = load_config(tmp_path, environ={})
    own = load_config(tmp_path, environ={"ACODE_FLEET_URL": "postgresql://q/db"})

    assert (fleet_url(mirror), mirror.fleet.lease_seconds) == ("postgresql://m/db", 2.0)
    assert fleet_url(own) == "postgresql://q/db"
    with pytest.raises(ConfigError, match="ACODE_FLEET_URL"):
        fleet_url(load_config(tmp_path / ".agent", environ={}))
    with pytest.raises(ConfigError, match=r"fleet\.lease_seconds"):
        parse_config({"fleet": {"lease_seconds": 0}}, "config.yml")


@pytest.mark.parametrize(
    "url",
    ["--upload-pack=touch x", "-u", "ext::sh -c id", "fd::3", "javascript://x", "", "a\x00b"],
)
def test_urls_git_would_misread_are_refused(url: str) -> None:
    with pytest.raises(UsageError):
        check_repo_url(url)


def test_a_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r.git").mkdir()
    monkeypatch.chdir(tmp_path)

    assert check_repo_url("r.git") == str(tmp_path / "r.git")
    assert check_repo_url("git@github.com:org/r.git") == "git@github.com:org/r.git"


def test_result_branches_of_sessions_started_together_differ() -> None:
    other = SID[:-6] + "000000"

    assert result_branch(SID) == "acode/01a21bd3-b70661"
    assert result_branch(SID) != result_branch(other)
