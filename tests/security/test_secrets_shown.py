"""Secrets never shown, never written where a person or a commit sees them (threat 4).

Each test puts secrets where a person puts them (a task's text, a command's error, a
private key a command prints, a breadcrumb, a subtask's summary) and reads every place
acode shows or writes them outside its database: the command's own output, `status`,
`session list`, `session show`, `session export`, the progress file, the lock file, the
"locked" error, the work-session documents, `breadcrumb list` and `work show`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.scenario import start_repository
from tests.cli.conftest import Background, Cli, Result, plan_yaml, wait_for
from tests.support.fake_openai import FakeOpenAI

PASSWORD = "hunter2-Hunter2-x"
TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
SECRETS = (PASSWORD, TOKEN)
TASK = f'Deploy with password = "{PASSWORD}" and the token {TOKEN}'

KEY_BODY = [
    "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB",
    "aFDrBz9vFqU4yM/5bvgBOaHjnwqgLBO7J3gq4oUdyVjTxO2x6Wfg8kE9R8QKQ0mN",
    "xB4wSpxhIk0Q5VdGb1xJ3p3bO6O7uK8QnB1EXAMPLEEXAMPLEEXAMPLEEXAMPLEX",
    "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4",
    "AbCdEfGhIjKl==",
]
KEY = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY, "-----END RSA PRIVATE KEY-----", ""])


class Shown:
    """Where each secret was shown; the test fails at its end, naming every place."""

    def __init__(self) -> None:
        self.places: list[str] = []

    def check(self, where: str, text: str, secrets: tuple[str, ...] = SECRETS) -> None:
        self.places += [f"{where} shows {s!r}" for s in secrets if s in text]

    def output(self, result: Result, secrets: tuple[str, ...] = SECRETS) -> None:
        self.check(f"`acode {' '.join(result.argv)[:60]}`", result.out + result.err, secrets)

    def done(self) -> None:
        assert not self.places, "\n".join(self.places)


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    return Cli(workspace, cli_env, background)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def agent(
    workspace: Path, cli_env: dict[str, str], background: Background, fake: FakeOpenAI
) -> Cli:
    start_repository(workspace)
    acode = Cli(workspace, cli_env, background)
    acode.write(".agent/config.yml", f"model:\n  base_url: {fake.base_url}\n  name: fake-model\n")
    return acode


def test_a_task_is_masked_wherever_it_is_shown(agent: Cli, fake: FakeOpenAI) -> None:
    shown = Shown()
    plan = {"tasks": [{"title": "Deploy", "steps": [{"title": "deploy it"}]}]}
    fake.converse(
        [
            {
                "tool": "submit_plan",
                # Slow enough to look at the running session: its lock, the locked error.
                "replies": [
                    {"delay": 3, "tool_calls": [{"name": "submit_plan", "arguments": plan}]}
                ],
            },
            {"match": "Now do task t1:", "replies": ["Deployed."]},
        ]
    )
    running = agent.start("run", TASK)
    rows: list[dict[str, object]] = []

    def listed() -> bool:
        rows[:] = agent.sessions()
        return bool(rows)

    wait_for("the session to be listed", listed)
    session = str(rows[0]["id"])
    [lock] = (agent.workspace / ".agent/state/locks").glob("*.lock")
    wait_for("the lock's owner record", lambda: lock.stat().st_size > 0)
    shown.check("the lock file", lock.read_text())
    shown.output(agent("resume", session, expect=16))
    shown.output(agent("resume", session, "--json", expect=16))
    shown.output(agent.finish(running, expect=0))
    for args in (
        ["status", session],
        ["status", session, "--json"],
        ["session", "list"],
        ["session", "list", "--json"],
        ["session", "show", session],
        ["session", "show", session, "--json"],
    ):
        shown.output(agent(*args))
    shown.done()


def test_the_json_lines_of_a_run_mask_its_task(agent: Cli, fake: FakeOpenAI) -> None:
    shown = Shown()
    plan = {"tasks": [{"title": "Deploy", "steps": [{"title": "deploy it"}]}]}
    fake.converse(
        [
            {
                "tool": "submit_plan",
                "replies": [{"tool_calls": [{"name": "submit_plan", "arguments": plan}]}],
            },
            {"match": "Now do task t1:", "replies": ["Deployed."]},
        ]
    )
    shown.output(agent("run", TASK, "--json"))
    shown.done()


def test_a_failing_steps_error_is_masked_in_status_and_show(acode: Cli) -> None:
    shown = Shown()
    command = f"echo password={PASSWORD} >&2; echo {TOKEN} >&2; exit 3"
    acode.write("plan.yml", plan_yaml("Fail", f"{{id: fail, run: '{command}'}}"))
    shown.output(acode("run", "plan.yml", expect=1))
    session = acode.only_session()["id"]
    for args in (
        ["status", session],
        ["status", session, "--json"],
        ["session", "show", session],
        ["session", "show", session, "--json"],
        ["session", "history", session],
        ["session", "history", session, "--json"],
    ):
        shown.output(acode(*args))
    shown.done()


@pytest.mark.parametrize(
    ("max_output", "body"),
    [
        (65536, KEY_BODY[:-1]),
        # The output keeps its last 200 bytes: the BEGIN line and the first lines are cut.
        (200, KEY_BODY[-3:-1]),
    ],
    ids=["whole", "cut-by-max-output-bytes"],
)
def test_a_private_key_printed_by_a_run_step_is_masked(
    acode: Cli, max_output: int, body: list[str]
) -> None:
    shown = Shown()
    acode.write("key.pem", KEY)
    acode.write(".agent/config.yml", f"run:\n  max_output_bytes: {max_output}\n")
    acode.write("plan.yml", plan_yaml("Key", "{id: show, run: cat key.pem, idempotent: true}"))
    secrets = tuple(body)
    shown.output(acode("run", "plan.yml"), secrets)
    session = acode.only_session()["id"]
    [progress] = (acode.workspace / ".agent/state/sessions").glob("*/progress.md")
    shown.check("the progress file", progress.read_text(), secrets)
    for args in (
        ["session", "show", session],
        ["session", "show", session, "--json"],
        ["session", "export", session, "--format", "md"],
        ["session", "export", session, "--format", "json"],
        ["session", "history", session, "--json"],
    ):
        shown.output(acode(*args), secrets)
    shown.done()


@pytest.fixture
def handsoff(acode: Cli) -> Cli:
    acode("settings", "set", "ai_stacking_mode", "handsoff")
    acode("task", "add", "Deploy")
    return acode


def test_breadcrumbs_and_summaries_are_masked_in_documents_and_listings(handsoff: Cli) -> None:
    shown = Shown()
    acode = handsoff
    parent = acode("work", "task", "task-001", "--json").json()["cookie"]
    child = acode(
        "work", "spawn", "--from-task", "task-001", "--title", "Find the key", "--json"
    ).json()["cookie"]
    note = f"the deploy password = '{PASSWORD}'"
    structured = json.dumps({"message": f"found {TOKEN}", "kind": "finding"})
    for message in (note, structured):
        added = acode("wsession", "breadcrumb", "add", "--cookie", child, "--message", message)
        shown.output(added)
    shown.output(acode("task", "done", "task-002", "--summary", f"use token {TOKEN}"))
    acode("wsession", "breadcrumb", "add", "--cookie", parent, "--message", note)
    for document in (acode.workspace / "docs/acode/work_sessions").glob("*.json"):
        shown.check(str(document.relative_to(acode.workspace)), document.read_text())
    for args in (
        ["wsession", "breadcrumb", "list", "--cookie", parent],
        ["wsession", "breadcrumb", "list", "--cookie", parent, "--json"],
        ["work", "show", parent],
        ["work", "show", parent, "--json"],
        ["work", "show", child],
        ["work", "show", child, "--json"],
        ["work", "list", "--json"],
    ):
        shown.output(acode(*args))
    shown.done()
