"""What docs/progress-file.md answers about cleaning up old progress files (003, 8): a
session's folder stays while its history does, and deleting it for a session that has
ended loses nothing: the progress file is a view that the database renders again."""

from __future__ import annotations

import shutil

from tests.cli.conftest import Cli, plan_yaml

__all__: list[str] = []


def _without_written(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("- **Written**:")]


def test_deleting_an_ended_sessions_folder_loses_nothing(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Ended", '{id: greet, write: out.txt, content: "hi\\n"}', "{id: r, read: out.txt}"
        ),
    )
    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]
    folder = acode.workspace / ".agent/state/sessions" / sid
    kept = (folder / "progress.md").read_text()

    shutil.rmtree(folder)
    exported, shown, history = acode.many(
        [
            ["session", "export", sid[:8], "--format", "md"],
            ["session", "show", sid[:8], "--json"],
            ["session", "history", sid[:8], "--json"],
        ]
    )

    assert _without_written(exported.out) == _without_written(kept)
    assert shown.json()["state"] == "COMPLETED"
    assert history.json()[-1]["payload"]["to"] == "COMPLETED"
    acode("session", "checkpoint", sid[:8], "--label", "after cleanup")
    assert '"after cleanup"' in (folder / "progress.md").read_text()
