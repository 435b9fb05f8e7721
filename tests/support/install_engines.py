"""Install the real engine CLIs that the work-session tests drive offline.

    python -m tests.support.install_engines [DEST]        # DEST defaults to <repo>/.engines

- Codex CLI and Claude Code: ``npm install --prefix DEST/npm`` at pinned versions (the npm
  packages carry their native binaries, so nothing else is downloaded);
- Aider: its own virtual environment ``DEST/aider`` (it pins many libraries that must not
  meet acode's), ``pip install aider-chat==<pin>``.

Idempotent: a stamp file per engine (``DEST/<engine>.installed``) holds the version it
installed; an engine whose stamp matches and whose executable exists is skipped. Where npm
is missing, it prints a loud warning and exits 0; the engine tests then skip saying so
(and fail under ``CI=true``). Each install is timed and the time printed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_DEST",
    "PINS",
    "Install",
    "executable",
    "install_all",
    "main",
    "stamp_path",
]

DEFAULT_DEST = Path(__file__).resolve().parents[2] / ".engines"


@dataclass(frozen=True)
class Install:
    """How one engine is installed and where its executable lands."""

    engine: str
    package: str
    version: str
    kind: str  # "npm" or "pip"
    relative_executable: str  # below DEST


PINS: tuple[Install, ...] = (
    Install("codex", "@openai/codex", "0.169.0", "npm", "npm/node_modules/.bin/codex"),
    Install(
        "claude", "@anthropic-ai/claude-code", "2.1.197", "npm", "npm/node_modules/.bin/claude"
    ),
    Install("aider", "aider-chat", "0.86.2", "pip", "aider/bin/aider"),
)


def executable(dest: Path, install: Install) -> Path:
    return dest / install.relative_executable


def stamp_path(dest: Path, engine: str) -> Path:
    return dest / f"{engine}.installed"


def _is_current(dest: Path, install: Install) -> bool:
    stamp = stamp_path(dest, install.engine)
    return (
        stamp.is_file()
        and stamp.read_text(encoding="utf-8").strip() == install.version
        and executable(dest, install).exists()
    )


def _run(argv: Sequence[str]) -> None:
    print("  $ " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def _install_npm(dest: Path, install: Install) -> bool:
    npm = shutil.which("npm")
    if npm is None:
        print(
            f"!!!!! WARNING: npm is not installed: {install.engine} ({install.package}) is NOT "
            "installed and its engine tests will be SKIPPED (they fail under CI=true). "
            "Install Node.js and npm (Debian: apt-get install -y npm) and run this again. !!!!!",
            flush=True,
        )
        return False
    prefix = dest / "npm"
    prefix.mkdir(parents=True, exist_ok=True)
    # --save (npm's default) keeps both packages in DEST/npm/package.json, so installing
    # the second one does not prune the first.
    _run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"{install.package}@{install.version}",
        ]
    )
    return True


def _install_pip(dest: Path, install: Install) -> bool:
    venv = dest / install.engine
    if not (venv / "bin" / "python").exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{install.package}=={install.version}",
        ]
    )
    return True


def install_all(dest: Path) -> dict[str, float | None]:
    """Install every pinned engine not yet current in ``dest``.

    Returns the seconds each install took (0.0 when it was already current, None when it
    could not be installed here).
    """
    dest.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float | None] = {}
    for install in PINS:
        label = f"{install.engine} ({install.package} {install.version})"
        if _is_current(dest, install):
            print(f"engines: {label} already installed in {dest}", flush=True)
            timings[install.engine] = 0.0
            continue
        print(f"engines: installing {label} into {dest}", flush=True)
        started = time.monotonic()
        installer = _install_npm if install.kind == "npm" else _install_pip
        if not installer(dest, install):
            timings[install.engine] = None
            continue
        if not executable(dest, install).exists():
            raise SystemExit(
                f"engines: {label} installed but {executable(dest, install)} is missing"
            )
        stamp_path(dest, install.engine).write_text(install.version + "\n", encoding="utf-8")
        elapsed = time.monotonic() - started
        timings[install.engine] = elapsed
        print(f"engines: {label} installed in {elapsed:.1f} s", flush=True)
    return timings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.install_engines")
    parser.add_argument("dest", nargs="?", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    try:
        install_all(args.dest.resolve())
    except subprocess.CalledProcessError as exc:
        print(f"engines: install failed (exit {exc.returncode}): {exc.cmd}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
