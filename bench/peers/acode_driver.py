"""acode through its library, the way an agent's author writes it: open a session and
call ``s.step`` for every step; after a crash, resume it and make the same calls, which
return the recorded results of completed steps without running them.

Variants: ``full`` (the default durability, fsync at every commit) and ``normal``;
``full-skip`` recovers as a caller who needs no result of the completed steps does:
``s.skip_completed()`` and the loop from the position it returns. In ``steps`` mode,
``full-resumed`` and ``normal-resumed`` time their steps in the session a crash run left
in the directory, resumed and its completed steps called again (replayed, untimed);
``-resumed-skip`` skips them with ``s.skip_completed()`` instead; the others record
``--before`` steps untimed first (bench.after_resume). ``pg`` (steps mode only) is
``full`` with the PostgreSQL database ``--url`` as the session store (bench.pg_side_by_side).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Any

from bench.peers.protocol import Args, SideEffects, Turns, emit, kill_self, parse_args, payload

__all__ = ["main"]

_DB = Path(".agent/state/acode.db")


def _configure(workspace: Path, variant: str, url: str | None) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    if variant == "pg":
        assert url is not None, "the pg variant needs --url"
        # The way a person points acode at PostgreSQL, durability left at its default.
        os.environ["ACODE_STORE_URL"] = url
        return
    durability = variant.removesuffix("-skip")
    if durability != "full":
        config = workspace / ".agent" / "config.yml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f"durability: {durability}\n", encoding="utf-8")


def _steps(args: Args) -> None:
    import acode

    def trivial(ctx: acode.StepContext) -> dict[str, Any]:
        return payload(ctx.position)

    if "-resumed" in args.variant:
        session = acode.resume_session(None, args.directory)
        if args.variant.endswith("-skip"):
            first = session.skip_completed()
        else:
            first = session.steps_completed
            for i in range(first):
                session.step(f"step-{i}", trivial)
    else:
        _configure(args.directory, args.variant, args.url)
        session = acode.open_session("bench", args.directory)
        first = args.before
        for i in range(first):
            session.step(f"step-{i}", trivial)
    turns = Turns(args.chunk)
    gc.collect()
    turns.ready(args.directory / _DB)
    for i in range(args.n):
        turns.before(i)
        session.step(f"step-{first + i}", trivial)
    turns.end()
    session.close()


def _workflow(args: Args) -> None:
    """The crash run and the recovery: the same code, as acode asks of its callers."""
    import acode

    side = SideEffects(args.side, probe=args.mode == "probe")

    def effect(ctx: acode.StepContext) -> dict[str, Any]:
        side.record(ctx.position)
        return payload(ctx.position)

    if args.mode == "crash":
        _configure(args.directory, args.variant, args.url)
        session = acode.open_session("bench", args.directory)
    else:
        session = acode.resume_session(None, args.directory)
    side.mark_loaded()
    start = session.skip_completed() if args.variant.endswith("-skip") else 0
    with session:
        for i in range(start, args.n):
            if i == args.kill_after and args.mode == "crash":
                kill_self()
            session.step(f"step-{i}", effect)
    side.report()


def main() -> int:
    args = parse_args()
    # The signing key: the parent passes it; a key file in the home is not ours to make.
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    if args.mode == "steps":
        _steps(args)
    else:
        _workflow(args)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
