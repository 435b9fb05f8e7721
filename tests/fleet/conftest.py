"""Fixtures of the fleet tests: the sync tests' real PostgreSQL, a database and a fault
proxy per test, bare git repositories on disk as the repositories' URLs, and worker
processes each in a directory of its own, standing in for machines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import PgServer, scratch_database
from tests.support.tcp_proxy import Proxy
from tests.sync.conftest import SECRET

__all__: list[str] = []

ACODE = str(Path(sys.executable).with_name("acode"))
LEASE_SECONDS = 2


@dataclass
class Fleet:
    pg: PgServer
    dbname: str
    proxy: Proxy
    root: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)  # the workers' besides

    @property
    def url(self) -> str:
        """The queue reached directly (no proxy)."""
        return self.pg.url_via(self.proxy.port, self.dbname)

    def env(self, url: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACODE_")}
        env.update(
            ACODE_FLEET_URL=url or self.url,
            ACODE_CHECKPOINT_SECRET=SECRET,
            COLUMNS="100",
        )
        env.update(self.extra_env)
        return env

    def acode(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ACODE, *args],
            cwd=cwd or self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def home(self, name: str) -> Path:
        """A worker's directory (its machine), leases of LEASE_SECONDS."""
        home = self.root / name
        (home / ".agent").mkdir(parents=True, exist_ok=True)
        (home / ".agent" / "config.yml").write_text(
            f"fleet:\n  lease_seconds: {LEASE_SECONDS}\n", encoding="utf-8"
        )
        return home

    def worker(self, name: str, *args: str, url: str | None = None) -> subprocess.Popen[str]:
        home = self.home(name)
        proc = subprocess.Popen(
            [ACODE, "worker", "-w", str(home), "--json", *args],
            cwd=home,
            env=self.env(url),
            stdout=(home / "worker.out").open("w"),
            stderr=(home / "worker.err").open("w"),
            text=True,
        )
        self.procs.append(proc)
        return proc

    def output(self, name: str) -> list[dict[str, Any]]:
        text = (self.root / name / "worker.out").read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.pg.direct_dsn(self.dbname), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        import psycopg

        with psycopg.connect(self.pg.direct_dsn(self.dbname), autocommit=True) as conn:
            conn.execute(sql, params)

    def items(self) -> list[dict[str, Any]]:
        shown = self.acode("queue", "list", "--json")
        assert shown.returncode == 0, shown.stderr
        return list(json.loads(shown.stdout))

    def wait_for(self, what: str, predicate: Any, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        logs = {
            p.name: (p / "worker.err").read_text()[-2000:]
            for p in self.root.iterdir()
            if (p / "worker.err").exists()
        }
        raise AssertionError(f"timed out waiting for {what}; items {self.items()}; {logs}")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


@pytest.fixture
def fleet(pg_server: PgServer, tmp_path: Path) -> Iterator[Fleet]:
    with scratch_database(pg_server) as name:
        proxy = Proxy(pg_server.target).start()
        fleet = Fleet(pg_server, name, proxy, tmp_path)
        try:
            yield fleet
        finally:
            fleet.stop_all()
            proxy.close()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def bare_repo(tmp_path: Path) -> Path:
    """A bare repository on disk with one commit on main: the repository URL."""
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / "README.md").write_text("# project\n", encoding="utf-8")
    git(source, "add", "README.md")
    git(source, "commit", "-q", "-m", "first")
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    return bare


def write_plan(path: Path, index: int, effects: Path, sleep: float = 0) -> Path:
    """A plan with a write, run steps that append to ``effects`` (outside every
    workspace: a step run twice shows there twice), a commit, and a write left
    uncommitted (the worker commits the work tree before pushing)."""
    path.write_text(
        f"""title: item {index}
tasks:
  - id: t
    title: work
    steps:
      - {{id: w1, write: out/a{index}.txt, content: "hello {index}"}}
      - {{id: e1, run: "echo {index}-e1 >> {effects}"}}
      - {{id: slow, run: "sleep {sleep}", idempotent: true}}
      - {{id: e2, run: "echo {index}-e2 >> {effects}"}}
      - {{id: c, commit: "Add a{index}"}}
      - {{id: w2, write: out/b{index}.txt, content: "bye {index}"}}
""",
        encoding="utf-8",
    )
    return path


def reference_tree(fleet: Fleet, bare: Path, plan: Path, name: str) -> str:
    """The tree an uninterrupted `acode run` of ``plan`` in a clone leaves, committed."""
    clone = fleet.root / name
    git(fleet.root, "clone", "-q", str(bare), str(clone))
    ran = fleet.acode("run", str(plan), "-w", str(clone), "--mode", "autopilot", cwd=clone)
    assert ran.returncode == 0, ran.stderr
    git(clone, "add", "--all")
    return git(clone, "write-tree")
