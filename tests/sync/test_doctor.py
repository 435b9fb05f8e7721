"""`acode doctor` with a remote: whether it answers, and how many events wait for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml
from tests.sync.conftest import Mirror, local_events


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background, mirror: Mirror) -> Cli:
    return Cli(workspace, {**cli_env, "ACODE_SYNC_DSN": mirror.dsn}, background)


def test_doctor_names_a_remote_that_is_down_and_the_events_waiting(
    acode: Cli, mirror: Mirror
) -> None:
    mirror.proxy.down()
    acode.write("plan.yml", plan_yaml("Mirrored", '{id: one, write: one.txt, content: "1\\n"}'))
    acode("run", "plan.yml")
    events = len(local_events(acode.workspace, acode.only_session()["id"]))

    report = acode("doctor", "--json", expect=1).json()
    checks = {c["name"]: c for c in report["checks"]}

    assert checks["remote"]["status"] == "fail"
    assert f"Connection refused (127.0.0.1:{mirror.proxy.port})" in checks["remote"]["detail"]
    assert checks["sync backlog"] == {
        "name": "sync backlog",
        "status": "warn",
        "detail": f"{events} events wait for the remote",
        "fix": "acode sync",
    }

    mirror.proxy.up()
    acode(checks["sync backlog"]["fix"].split()[1])
    checks = {c["name"]: c for c in acode("doctor", "--json").json()["checks"]}
    assert checks["remote"]["status"] == "ok"
    assert checks["sync backlog"]["status"] == "ok"
