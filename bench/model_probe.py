"""NFR-002 with the model in it: the environment validation of a resume whose remaining
step needs the model, against a model server that answers and one that takes the
connection and never answers.

The session: a plan of an approval and a ``model`` step, run by ``acode run`` until it
waits for the approval, then approved; what remains needs the model. Its server is
tests/support/busy_model.py's OpenAI-compatible server on 127.0.0.1: idle, it answers at
once; busy, it takes every connection and answers none (until the benchmark ends). The
same session and the same configuration meet both, in turns: ``preview_resume()``
in-process (what ``acode resume --dry-run`` does after start-up) and ``acode resume ID
--dry-run`` as a process.
"""

from __future__ import annotations

import gc
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.workloads import ACODE_CLI

__all__ = ["BUDGET_SECONDS", "SERVERS", "ModelProbe", "run_model_probe"]

# NFR-002: validating the environment takes 2 s at most.
BUDGET_SECONDS = 2.0
SERVERS = (
    ("live", "a server that answers"),
    ("silent", "a server that takes the connection and never answers"),
)
_WAITING = re.compile(r"Session (\S+) is waiting for approval")
_PLAN = """\
title: Ask the model
tasks:
  - id: main
    title: Ask
    steps:
      - {id: ok, approve: Go on?}
      - {id: ask, model: Say hi.}
"""


@dataclass
class ModelProbe:
    configured_timeout: float  # resume.validation_timeout_seconds in effect
    # server key -> seconds of preview_resume() / of `acode resume --dry-run`
    preview_seconds: dict[str, list[float]] = field(default_factory=dict)
    cli_seconds: dict[str, list[float]] = field(default_factory=dict)
    # server key -> what the validation said about the model, as a person reads it
    verdicts: dict[str, set[str]] = field(default_factory=dict)
    # server key -> the exit statuses of `acode resume --dry-run`
    statuses: dict[str, set[int]] = field(default_factory=dict)


def _acode(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ACODE_CLI), *args, "-w", str(workspace)],
        capture_output=True,
        text=True,
        check=False,
    )


def _dry_run(workspace: Path, session_id: str) -> tuple[float, int]:
    """Wall time of `acode resume ID --dry-run`, start-up included, and its exit status
    (a validation that finds a problem may end it with an error)."""
    start = time.perf_counter()
    done = _acode(workspace, "resume", session_id, "--dry-run")
    return time.perf_counter() - start, done.returncode


def _session(workspace: Path, base_url: str, model: str) -> str:
    """A session whose next step asks the model, with the model not asked yet."""
    (workspace / ".agent").mkdir(parents=True)
    (workspace / ".agent" / "config.yml").write_text(
        f"model:\n  base_url: {base_url}\n  name: {model}\n", encoding="utf-8"
    )
    (workspace / "plan.yml").write_text(_PLAN, encoding="utf-8")
    ran = _acode(workspace, "run", str(workspace / "plan.yml"))
    found = _WAITING.search(" ".join(ran.stderr.split()))
    if ran.returncode != 20 or found is None:
        raise RuntimeError(f"acode run exited {ran.returncode}, not waiting:\n{ran.stderr}")
    approved = _acode(workspace, "approve", found.group(1))
    if approved.returncode != 0:
        raise RuntimeError(f"acode approve exited {approved.returncode}:\n{approved.stderr}")
    return found.group(1)


def _verdict(check: object) -> str:
    if check is None:
        return "not checked"
    if getattr(check, "problem", None):
        return "reported as a problem"
    if getattr(check, "busy", False):
        return "reported as busy, a pass"
    return "answered, a pass"


def _preview(workspace: Path, session_id: str) -> tuple[float, str]:
    from acode.resume.service import preview_resume

    gc.collect()
    start = time.perf_counter()
    preview = preview_resume(session_id, workspace)
    seconds = time.perf_counter() - start
    environment = preview.environment
    return seconds, _verdict(None if environment is None else environment.model)


def run_model_probe(samples: int, scratch: Path, progress: Callable[[str], None]) -> ModelProbe:
    from acode.engine.lifecycle import existing_workspace
    from tests.support.busy_model import MODEL, BusyModelServer

    workspace = scratch / "model-probe"
    with BusyModelServer() as server:
        session_id = _session(workspace, server.base_url, MODEL)
        timeout = existing_workspace(workspace).config.resume.validation_timeout_seconds
        results = ModelProbe(configured_timeout=timeout)
        for _ in range(samples):
            for key, _ in SERVERS:
                if key == "silent":
                    server.busy()
                seconds, verdict = _preview(workspace, session_id)
                results.preview_seconds.setdefault(key, []).append(seconds)
                results.verdicts.setdefault(key, set()).add(verdict)
                seconds, status = _dry_run(workspace, session_id)
                results.cli_seconds.setdefault(key, []).append(seconds)
                results.statuses.setdefault(key, set()).add(status)
                server.earlier_request_done()
        for key, _ in SERVERS:
            progress(
                f"validation with the model, {key} server: preview_resume "
                f"{max(results.preview_seconds[key]):.2f} s at most, "
                f"{' / '.join(sorted(results.verdicts[key]))}"
            )
    return results
