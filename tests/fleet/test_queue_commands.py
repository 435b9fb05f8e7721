"""`acode queue add | list | cancel` and `acode worker status` against a real PostgreSQL,
with the input a careless or hostile person gives."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fleet.conftest import Fleet, write_plan


def test_add_list_cancel(fleet: Fleet, bare_repo: Path) -> None:
    plan = write_plan(fleet.root / "plan.yaml", 1, fleet.root / "effects")

    added = fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo), "--json")
    task = fleet.acode("queue", "add", "Add a README", "--repo", str(bare_repo), "--queue", "q-2")
    listed = fleet.acode("queue", "list")
    only = fleet.acode("queue", "list", "--queue", "q-2", "--json")

    assert added.returncode == 0, added.stderr
    item = json.loads(added.stdout)
    assert (item["state"], item["kind"], item["title"], item["queue"]) == (
        "queued",
        "plan",
        "item 1",
        "default",
    )
    assert task.returncode == 0, task.stderr
    assert task.stdout.startswith("Queued item 2 on q-2: Add a README")
    assert "item 1" in listed.stdout
    assert "queued" in listed.stdout
    assert [i["id"] for i in json.loads(only.stdout)] == [2]

    cancelled = fleet.acode("queue", "cancel", "1")
    again = fleet.acode("queue", "cancel", "1")
    missing = fleet.acode("queue", "cancel", "99")

    assert cancelled.returncode == 0, cancelled.stderr
    assert fleet.items()[0]["state"] == "cancelled"
    assert again.returncode == 1
    assert "ACODE-FLEET-002" in again.stderr
    assert "is cancelled" in again.stderr
    assert missing.returncode == 1
    assert "no queue item 99" in missing.stderr


def test_credentials_in_a_repo_url_are_never_shown(fleet: Fleet) -> None:
    url = "https://user:s3cr3t-token@git.example.invalid/org/repo.git"

    added = fleet.acode("queue", "add", "Fix it", "--repo", url, "--json")
    listed = fleet.acode("queue", "list")

    assert added.returncode == 0, added.stderr
    for text in (added.stdout, added.stderr, listed.stdout, listed.stderr):
        assert "s3cr3t" not in text
    assert json.loads(added.stdout)["repo_url"] == "https://***@git.example.invalid/org/repo.git"


def test_hostile_and_mistaken_input_is_refused_before_anything_is_queued(
    fleet: Fleet, bare_repo: Path
) -> None:
    bad_plan = fleet.root / "bad.yaml"
    bad_plan.write_text("title: x\ntasks:\n  - id: t\n    steps:\n      - {id: a, nope: 1}\n")
    cases = {
        "option": ["Fix", "--repo", "--upload-pack=touch /tmp/pwned"],
        "option2": ["Fix", "--repo=--upload-pack=touch /tmp/pwned"],
        "ext": ["Fix", "--repo", "ext::sh -c touch% /tmp/pwned"],
        "scheme": ["Fix", "--repo", "javascript://x"],
        "nowhere": ["Fix", "--repo", str(fleet.root / "missing")],
        "plan": [str(bad_plan), "--repo", str(bare_repo)],
        "queue": ["Fix", "--repo", str(bare_repo), "--queue", "a b;drop table"],
        "queue2": ["Fix", "--repo", str(bare_repo), "--queue", "-x"],
        "branch": ["Fix", "--repo", str(bare_repo), "--branch", "-oops"],
        "branch2": ["Fix", "--repo", str(bare_repo), "--branch", "a..b"],
    }
    for name, args in cases.items():
        result = fleet.acode("queue", "add", *args)
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, name
        assert "error ACODE-" in result.stderr, (name, result.stderr)
    assert not Path("/tmp/pwned").exists()
    assert fleet.items() == []


def test_no_queue_configured_says_how_to_set_one(tmp_path: Path) -> None:
    import subprocess

    from tests.fleet.conftest import ACODE

    result = subprocess.run(
        [ACODE, "queue", "list"], cwd=tmp_path, capture_output=True, text=True, check=False
    )

    assert result.returncode == 2
    assert "ACODE_FLEET_URL" in result.stderr


def test_an_unreachable_queue_is_one_line_with_no_password(fleet: Fleet) -> None:
    fleet.proxy.down()
    url = fleet.pg.url_via(fleet.proxy.port, fleet.dbname, user="u", password="pw-secret")
    import subprocess

    from tests.fleet.conftest import ACODE

    result = subprocess.run(
        [ACODE, "queue", "list"],
        env=fleet.env(url),
        cwd=fleet.root,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 1
    assert "ACODE-FLEET-003" in result.stderr
    assert "pw-secret" not in result.stderr
