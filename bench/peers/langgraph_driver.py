"""LangGraph through its public API: a ``StateGraph`` whose one node loops back to
itself once per step, compiled with a ``SqliteSaver`` checkpointer, so every step is a
super-step with its own checkpoint. After a crash, ``invoke(None, config)`` on the same
thread continues from the newest checkpoint.

Variants: ``counter`` (the state is a step counter; LangGraph's default durability,
"async"), ``counter-sync`` (the same with ``durability="sync"``: the checkpoint is
written before the next step starts) and ``accumulate`` (the state also keeps every
step's result, default durability).
"""

from __future__ import annotations

import gc
import operator
import sqlite3
import sys
from typing import Annotated, Any, Literal, TypedDict

from bench.peers.protocol import SideEffects, Turns, emit, kill_self, parse_args, payload

__all__ = ["main"]


class _Counter(TypedDict):
    count: int


class _Accumulated(TypedDict):
    count: int
    results: Annotated[list[dict[str, Any]], operator.add]


def main() -> int:
    args = parse_args()
    # Installed in .venv-bench only: mypy, run from acode's .venv, does not see it.
    from langgraph.checkpoint.sqlite import (  # type: ignore[import-not-found, unused-ignore]
        SqliteSaver,
    )
    from langgraph.graph import (  # type: ignore[import-not-found, unused-ignore]
        END,
        START,
        StateGraph,
    )

    args.directory.mkdir(parents=True, exist_ok=True)
    path = args.directory / "langgraph.sqlite"
    side = SideEffects(args.side, probe=args.mode == "probe")
    turns = Turns(args.chunk)
    timed = args.mode == "steps"
    accumulate = args.variant.startswith("accumulate")
    durability: Literal["sync", "async"] = "sync" if args.variant.endswith("-sync") else "async"
    kill_after = args.kill_after if args.mode == "crash" else -1
    n = args.n

    def step(state: dict[str, Any]) -> dict[str, Any]:
        i = int(state["count"])
        if timed:
            turns.before(i)
        elif i == kill_after:
            kill_self()
        else:
            side.record(i)
        update: dict[str, Any] = {"count": i + 1}
        if accumulate:
            update["results"] = [payload(i)]
        else:
            payload(i)  # computed like every engine's, but the state keeps only the count
        return update

    def route(state: dict[str, Any]) -> str:
        return "step" if state["count"] < n else END

    builder: Any = StateGraph(_Accumulated if accumulate else _Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route)
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
    start: dict[str, Any] = {"count": 0, "results": []} if accumulate else {"count": 0}
    side.mark_loaded()
    if args.mode in ("recover", "probe"):
        graph.invoke(None, config, durability=durability)
        side.report()
    else:
        if timed:
            gc.collect()
            turns.ready(path)
        graph.invoke(start, config, durability=durability)
        if timed:
            turns.end()
    conn.close()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
