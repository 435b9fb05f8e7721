"""The side-by-side sections of docs/benchmarks.md: tables, the issue's targets, a reading."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.budget import BUDGET
from bench.coldstart import BASELINE
from bench.compare import BASE
from bench.peers import Peer
from bench.side_by_side import SideBySide, SideBySideSettings

__all__ = ["render_side_by_side"]

# Issue 19's targets; the looser ones met before (1.5x, 2x, 10x) are not goals any more.
STEP_VS_BARE = 1.25  # acode per step within 1.25x the bare synchronous=FULL insert
LESS_THAN_DBOS = 4.0  # at least 4x less overhead than DBOS on SQLite
LESS_THAN_LANGGRAPH = 3.0  # at least 3x less than LangGraph's SqliteSaver, counter state
BYTES_VS_BARE = 1.5
FLAT_RECOVERY = 1.5  # the longest history recovers within 1.5x of the shortest
FIRST_STEP_VS_BARE = 3.0
# acode recovering as a caller who needs no result of the completed steps does.
SKIP = "acode-skip"
IMPORT_MS = 30.0
COMMANDS_VS_PYTHON = 3.0  # acode resume --dry-run and acode session list
REPLAY_US = 5.0  # replaying a completed step, per step
_DRY_RUN = "acode resume --dry-run"
_LIST = "acode session list"
_IMPORT = 'python -c "import acode"'


@dataclass(frozen=True)
class _Target:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run
    # Why a miss does not count as one: the comparison is not at equal durability.
    not_comparable: str | None = None


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _x(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:,.0f}x"


def _verdict(target: _Target) -> str:
    if target.met is None:
        return "not measured"
    if target.met:
        return "met"
    return f"not comparable: {target.not_comparable}" if target.not_comparable else "**missed**"


def render_side_by_side(result: SideBySide) -> str:
    sections = [
        _intro(result),
        _steps_table(result),
        _recovery_table(result),
        _history_table(result),
        _bytes_table(result),
        _coldstart_table(result),
        _budget_table(result),
        _targets_table(_targets(result)),
        _reading(result, _targets(result)),
    ]
    return "\n".join(sections)


def _intro(result: SideBySide) -> str:
    s = result.settings
    versions = ", ".join(f"{name} {version}" for name, version in result.versions.items())
    return f"""## Side by side with DBOS, LangGraph and bare SQLite

Every engine runs in its own process (`bench/peers/`), driven through its public API:
acode's `open_session` / `Session.step`; DBOS's `@DBOS.workflow` and `@DBOS.step` with a
SQLite system database; a LangGraph `StateGraph` whose one node loops once per step,
compiled with a `SqliteSaver` checkpointer; one hand-written SQLite insert per step; and
plain Python with no persistence. Each step returns the same ~200-byte dict. Peer
versions: {versions}. Installed by `make bench` into `.venv-bench` (the `bench` extra of
pyproject.toml), never into acode's own environment; the command it runs is
`.venv-bench/bin/python -m bench`{" --full" if s.full else ""}.
"""


def _label(peers: tuple[Peer, ...], key: str) -> str:
    return next(p.label for p in peers if p.key == key)


def _chunks(s: SideBySideSettings) -> str:
    """The steps of a turn at each size, in words: "50 steps at 1,000 and 500 at 10,000"."""
    parts = [f"{math.ceil(n / s.turns):,} at {n:,}" for n in s.step_sizes]
    parts[0] = parts[0].replace(" at ", " steps at ", 1)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _steps_table(result: SideBySide) -> str:
    steps, s = result.steps, result.settings
    head = " | ".join(f"{n:,} steps: µs | x acode" for n in s.step_sizes)
    lines = [
        "### Per-step overhead",
        "",
        f"Microseconds per trivial step, medians of {s.step_runs} rounds. In a round the "
        f"engines run their workflows at once, each in its process, taking {s.turns} turns "
        f"each (a turn is {_chunks(s)}; the order reversing every turn and shifting every "
        "round), so the machine's drift hits all alike; only each engine's own turns are "
        "timed, and the "
        "others are stopped (SIGSTOP) meanwhile, so that an engine's background threads "
        "(LangGraph's asynchronous checkpoint writes, DBOS's polling) work in its own turns, "
        "not for free in another's. A turn is a share of the run, not a fixed number of "
        "steps: an engine stopped through the others' turns sees the wall clock run on, and "
        "in turns of 50 steps acode's 10,000 were spread over some 100 s, in which it "
        "rewrote its progress file (at most once a second of wall time) about 80 times "
        "instead of the 4 of a run on its own, 80 µs a step. Those that "
        "wait for the disk at every commit take turns among themselves, the three that do "
        "not (acode normal, bare NORMAL, plain Python) among themselves: on ext4 a "
        "neighbour's fsyncs stall their writes threefold. "
        "\"x acode\" is the median over rounds of the engine's time over acode's (durability "
        "full) in the same round: above 1, acode is faster.",
        "",
        f"| engine | {head} |",
        "|---|" + "---:|---:|" * len(s.step_sizes),
    ]
    for peer in steps.peers:
        cells = []
        for n in s.step_sizes:
            if steps.has(n, peer.key):
                cells.append(
                    f"{_us(steps.median_us(n, peer.key))} | {_x(steps.ratio(n, peer.key))}"
                )
            else:
                cells.append("- | -")
        lines.append(f"| {peer.label} | {' | '.join(cells)} |")
    skipped = [p for p in steps.peers if not all(steps.has(n, p.key) for n in s.step_sizes)]
    if skipped:
        names = ", ".join(p.label for p in skipped)
        lines += ["", f"Not run at every size (minutes and gigabytes beyond): {names}."]
    return "\n".join(lines) + "\n"


def _recovery_table(result: SideBySide) -> str:
    rec, s = result.recovery, result.settings
    lines = [
        "### Crash recovery",
        "",
        "A workflow of N steps SIGKILLs itself once N/2 steps are done; a new process "
        "recovers it. Milliseconds from the new process's start (interpreter start-up and "
        "imports included) until the engine has loaded its state, until the first step that "
        "had not run before starts, and until the last step is done; then, from a file each "
        "step appends its position to, the steps that ran twice and those that never ran "
        f"(the worst of {s.recovery_runs} runs). Medians of {s.recovery_runs} runs.",
        "",
        "| N | engine | loaded | first new step | x acode | all done | ran twice | never ran |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n in s.recovery_sizes:
        for peer in rec.peers:
            if not rec.has(n, peer.key):
                continue
            first = rec.median(n, peer.key, "first_new_s")
            ratio = first / rec.median(n, BASE, "first_new_s")
            lines.append(
                f"| {n:,} | {peer.label} | {_ms(rec.median(n, peer.key, 'loaded_s'))} "
                f"| {_ms(first)} | {_x(ratio)} | {_ms(rec.median(n, peer.key, 'finished_s'))} "
                f"| {rec.worst_duplicates(n, peer.key)} | {rec.worst_missing(n, peer.key)} |"
            )
    replay = [
        f"{_us(_replay_us(result, n))} µs at {n // 2:,} completed steps"
        for n in s.recovery_sizes
        if rec.has(n, BASE)
    ]
    lines += [
        "",
        "acode's library resumes by running the caller's code again from the top: each "
        "completed step's `s.step` call returns its recorded result without running. That "
        'replay is the time from "loaded" to "first new step": per completed step, '
        + "; ".join(replay)
        + ". Recovering with `skip_completed()`, the caller's loop starts at the first step "
        "still to run instead, and the completed steps' results are not returned. Plain "
        "Python has nothing to recover from and runs every step again.",
    ]
    return "\n".join(lines) + "\n"


def _replay_us(result: SideBySide, n: int) -> float:
    samples = result.recovery.samples[(n, BASE)]
    return statistics.median((s.first_new_s - s.loaded_s) / (n // 2) * 1e6 for s in samples)


def _history_sizes(result: SideBySide) -> list[int]:
    return sorted({n for n, _ in result.recovery.samples})


def _history_table(result: SideBySide) -> str:
    rec = result.recovery
    sizes = _history_sizes(result)
    lines = [
        "### Recovery as the history grows",
        "",
        "Milliseconds from process start to the first new step, by the length of the "
        "history at the kill (N/2). The last column is the longest history's time over the "
        "shortest's."
        + (
            f" Histories of {', '.join(f'{n // 2:,}' for n in result.settings.history_sizes)} "
            f"steps are built once and recovered {result.settings.history_samples} times, each "
            "stopping at the first new step"
            + (
                ""
                if result.settings.history_peers is None
                else " (acode and the bare insert only; `--full` adds the others)"
            )
            + "."
            if result.settings.history_sizes
            else " Histories of 50,000 steps (N = 100,000) are left out of `--quick`."
        ),
        "",
        "| engine | " + " | ".join(f"{n // 2:,} done" for n in sizes) + " | growth |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for peer in rec.peers:
        present = [n for n in sizes if rec.has(n, peer.key)]
        if not present:
            continue
        cells = [
            _ms(rec.median(n, peer.key, "first_new_s")) if rec.has(n, peer.key) else "-"
            for n in sizes
        ]
        growth = rec.median(present[-1], peer.key, "first_new_s") / rec.median(
            present[0], peer.key, "first_new_s"
        )
        shown = _x(growth) if len(present) > 1 else "-"
        lines.append(f"| {peer.label} | {' | '.join(cells)} | {shown} |")
    return "\n".join(lines) + "\n"


def _bytes_table(result: SideBySide) -> str:
    steps, sizes = result.steps, result.settings.step_sizes
    lines = [
        "### Database size",
        "",
        "Bytes of database per step (the whole file, write-ahead log folded in, over the "
        "steps recorded), and the file's size after the largest run.",
        "",
        "| engine | "
        + " | ".join(f"{n:,} steps: B/step" for n in sizes)
        + " | x bare FULL | size at the largest run |",
        "|---|" + "---:|" * (len(sizes) + 2),
    ]
    for peer in steps.peers:
        per_step = [steps.bytes_per_step(n, peer.key) for n in sizes]
        if all(b is None for b in per_step):
            continue
        largest = max(n for n in sizes if steps.bytes_per_step(n, peer.key) is not None)
        own = steps.bytes_per_step(largest, peer.key)
        bare = steps.bytes_per_step(largest, "bare-full")
        assert own is not None
        ratio = _x(own / bare) if bare else "-"
        cells = " | ".join("-" if b is None else f"{b:,.0f}" for b in per_step)
        lines.append(
            f"| {peer.label} | {cells} | {ratio} | {own * largest / 1e6:,.1f} MB at {largest:,} |"
        )
    return "\n".join(lines) + "\n"


def _coldstart_table(result: SideBySide) -> str:
    cold = result.coldstart
    base = cold.median(BASELINE)
    lines = [
        "### Cold start",
        "",
        f"A new process each time, medians of {len(cold.seconds[BASELINE])} runs taken in "
        f"turns, after one uncounted run of each (byte code cached, as on a person's second "
        f"run). The acode commands look at a workspace holding an unfinished plan session "
        f"that read {cold.session_steps:,} files, one step each.",
        "",
        "| command | ms | over `python -c pass` | x `python -c pass` |",
        "|---|---:|---:|---:|",
    ]
    for label in cold.seconds:
        value = cold.median(label)
        lines.append(f"| `{label}` | {_ms(value)} | {_ms(value - base)} | {_x(value / base)} |")
    return "\n".join(lines) + "\n"


def _checkpoint_seconds(result: SideBySide) -> tuple[int, float]:
    """A checkpoint is committed with every step: the per-step time of the longest run."""
    n = max(result.settings.step_sizes)
    return n, result.steps.median_us(n, BASE) / 1e6


def _budget_table(result: SideBySide) -> str:
    b = result.budget
    n, checkpoint = _checkpoint_seconds(result)
    lines = [
        "### The specification's budget",
        "",
        f"acode's own parts, in-process, on a plan session of {b.steps:,} completed read "
        f"steps over {b.files:,} workspace files (medians of "
        f"{len(b.seconds['state recovery'])}). Checkpoint creation is the whole step, "
        f"checkpoint included, in the {n:,}-step per-step run. The ghost snapshot is "
        f"`acode.system.snapshot.snapshot_worktree` on a git repository of {b.snapshot_files:,} "
        "files, 11 of them changed or new.",
        "",
        "| what | ms | target | maximum | |",
        "|---|---:|---:|---:|---|",
    ]
    measured = {**{what: b.median_ms(what) for what in b.seconds}}
    measured["checkpoint creation"] = checkpoint * 1e3
    for what, ms in measured.items():
        if what in BUDGET:
            target, maximum = BUDGET[what]
            verdict = (
                "met"
                if ms <= target
                else "within the maximum"
                if ms <= maximum
                else ("**over the maximum**")
            )
            lines.append(f"| {what} | {ms:,.1f} | {target:g} | {maximum:g} | {verdict} |")
        else:
            lines.append(f"| {what} | {ms:,.1f} | | | |")
    return "\n".join(lines) + "\n"


def _targets(result: SideBySide) -> list[_Target]:
    steps, rec, cold = result.steps, result.recovery, result.coldstart
    n = max(result.settings.step_sizes)
    targets = []
    vs_bare = steps.ratio(n, BASE, base="bare-full")
    # Each round's own ratio too: how near the target the spread of the rounds comes.
    rounds = ", ".join(f"{r:.2f}" for r in steps.ratios(n, BASE, base="bare-full"))
    targets.append(
        _Target(
            f"a step within {STEP_VS_BARE:g}x the bare synchronous=FULL insert",
            f"{_x(vs_bare)} at {n:,} steps; rounds {rounds}",
            vs_bare <= STEP_VS_BARE,
        )
    )
    for key, factor in (("dbos", LESS_THAN_DBOS), ("lg-counter", LESS_THAN_LANGGRAPH)):
        if steps.has(n, key):
            less = steps.ratio(n, key)
            measured = f"it takes {_x(less)} acode's time at {n:,} steps"
            why = None
            if key == "lg-counter":
                # Its default writes checkpoints in the background while the next step
                # runs: faster, and not durable (the duplicated steps after a kill).
                why = "its default durability (async) loses steps on a kill; acode's does not"
                if steps.has(n, "lg-counter-sync"):
                    sync = steps.ratio(n, "lg-counter-sync")
                    measured += f"; with durability sync, {_x(sync)}"
            targets.append(
                _Target(
                    f"at least {factor:g}x less per step than {_label(steps.peers, key)}",
                    measured,
                    less >= factor,
                    why,
                )
            )
        else:
            targets.append(_Target(f"at least {factor:g}x less than {key}", "-", None))
    own, bare = steps.bytes_per_step(n, BASE), steps.bytes_per_step(n, "bare-full")
    assert own is not None
    assert bare is not None
    targets.append(
        _Target(
            f"database bytes per step within {BYTES_VS_BARE:g}x the bare insert",
            f"{own:,.0f} B against {bare:,.0f} B: {_x(own / bare)}",
            own / bare <= BYTES_VS_BARE,
        )
    )
    small = min(result.settings.step_sizes)
    if small != n:
        few = steps.bytes_per_step(small, BASE)
        assert few is not None
        targets.append(
            _Target(
                "no growth of the bytes per step with the history",
                f"{few:,.0f} B/step at {small:,} steps, {own:,.0f} at {n:,}",
                own <= 1.1 * few,
            )
        )
    targets += _recovery_targets(result)
    worst = max(
        s.duplicates
        for (_, key), samples in rec.samples.items()
        if key in (BASE, SKIP)
        for s in samples
        if s.duplicates is not None
    )
    runs = sum(len(v) for (_, key), v in rec.samples.items() if key in (BASE, SKIP))
    targets.append(
        _Target(
            "zero duplicated steps after a kill, every run",
            f"at most {worst} in {runs} runs",
            worst == 0,
        )
    )
    extra = cold.median(_IMPORT) - cold.median(BASELINE)
    targets.append(
        _Target(
            f"`import acode` adds at most {IMPORT_MS:g} ms",
            f"{_ms(extra)} ms",
            extra * 1e3 <= IMPORT_MS,
        )
    )
    for command in (_DRY_RUN, _LIST):
        ratio = cold.median(command) / cold.median(BASELINE)
        targets.append(
            _Target(
                f"`{command}` within {COMMANDS_VS_PYTHON:g}x `python -c pass`",
                f"{_x(ratio)} ({_ms(cold.median(command))} ms)",
                ratio <= COMMANDS_VS_PYTHON,
            )
        )
    for m in result.settings.recovery_sizes:
        if rec.has(m, BASE):
            replay = _replay_us(result, m)
            targets.append(
                _Target(
                    f"replaying a completed step at most {REPLAY_US:g} µs, N = {m:,}",
                    f"{_us(replay)} µs a step over {m // 2:,} completed steps, in the "
                    "recovering process",
                    replay <= REPLAY_US,
                )
            )
    return targets


def _recovery_targets(result: SideBySide) -> list[_Target]:
    """Judged on acode skipping its completed steps, the way to recover a workflow that
    needs none of their results (as the bare insert's does); replaying them, the way
    that returns every result, is shown beside it."""
    rec = result.recovery
    key = SKIP if any(k == SKIP for _, k in rec.samples) else BASE

    def growth(peer: str, what: str = "first_new_s") -> tuple[float, list[int]]:
        sizes = [m for m in _history_sizes(result) if rec.has(m, peer)]
        return rec.median(sizes[-1], peer, what) / rec.median(sizes[0], peer, what), sizes

    flat, sizes = growth(key)
    measured = (
        f"{_x(flat)} from N = {sizes[0]:,} to N = {sizes[-1]:,} "
        f"({sizes[0] // 2:,} to {sizes[-1] // 2:,} steps done), {_how(key)}"
    )
    if key == SKIP:
        measured += f"; replaying them: {_x(growth(BASE)[0])}"
    measured += f"; loading the state alone: {_x(growth(BASE, 'loaded_s')[0])}"
    targets = [
        _Target(
            f"recovery flat in history: 100,000 steps within {FLAT_RECOVERY:g}x of 1,000",
            measured,
            flat <= FLAT_RECOVERY if sizes[-1] >= 100_000 else None,
        )
    ]
    for m in result.settings.recovery_sizes:
        bare = rec.median(m, "bare-full", "first_new_s")
        ratio = rec.median(m, key, "first_new_s") / bare
        measured = f"{_x(ratio)}, {_how(key)}"
        if key == SKIP:
            measured += f"; replaying them: {_x(rec.median(m, BASE, 'first_new_s') / bare)}"
        targets.append(
            _Target(
                f"first new step within {FIRST_STEP_VS_BARE:g}x the bare-SQLite recovery, "
                f"N = {m:,}",
                measured,
                ratio <= FIRST_STEP_VS_BARE,
            )
        )
    return targets


def _how(key: str) -> str:
    return "skipping the completed steps" if key == SKIP else "replaying the completed steps"


def _targets_table(targets: list[_Target]) -> str:
    lines = [
        "### Targets of issue 5",
        "",
        "| target | measured | |",
        "|---|---:|---|",
    ]
    lines += [f"| {t.text} | {t.measured} | {_verdict(t)} |" for t in targets]
    return "\n".join(lines) + "\n"


def _reading(result: SideBySide, targets: list[_Target]) -> str:
    met = [t for t in targets if t.met]
    missed = [t for t in targets if t.met is False and not t.not_comparable]
    apart = [t for t in targets if t.met is False and t.not_comparable]
    unmeasured = [t for t in targets if t.met is None]
    points = [
        f"- {len(met)} of {len(targets)} targets met, {len(missed)} missed"
        + (f", {len(apart)} not comparable at equal durability" if apart else "")
        + (f", {len(unmeasured)} not measured in this run" if unmeasured else "")
        + ".",
    ]
    if missed:
        points.append("- Missed: " + "; ".join(f"{t.text} ({t.measured})" for t in missed) + ".")
    points += [
        f"- Not comparable: {t.text} ({t.measured}): {t.not_comparable}. An engine that "
        "waits for each step's record to be on disk before the next step starts cannot "
        "be 3x faster than one that does not wait; LangGraph at acode's durability is "
        'its "sync" mode, compared below.'
        for t in apart
    ]
    if any(t.text.startswith("a step within") for t in missed):
        points += _step_target_point(result)
    if any(t.text.startswith("database bytes") for t in missed):
        points.append(
            "- Bytes (SQLite's dbstat on a 10,000-step database): a step's row in `events` "
            "holds, besides the result the bare insert stores, what makes it verifiable and "
            "resumable: the keyed link (16 B), the checkpoint's signature (16 B; its "
            "summary is written every 32 events, 1.5 B a step), the event id (16 B), time "
            "and type (about 22 B), the step's id and position around the result (about "
            "46 B), the row's header and keys (about 15 B), and the step id's entry in the "
            "ledger (about 17 B). Removing what repeats (session and sequence columns "
            "computed from the key, the type as a small number, the event id's time) gives "
            "about 364 B (1.68x): the 1.5x target leaves 108 B over the bare row, less than "
            "the link, signature, event id, time and step id that the design requires."
        )
    points += _recovery_points(result)
    points += _peer_points(result)
    return "### Reading\n\n" + "\n".join(points) + "\n"


def _step_target_point(result: SideBySide) -> list[str]:
    """Why a ratio to the bare insert can miss on a fast disk: acode's own work per step
    does not shrink with the fsync, so the target leaves it less room the faster the disk."""
    steps = result.steps
    n = max(result.settings.step_sizes)
    if not (steps.has(n, "acode-normal") and steps.has(n, "bare-normal")):
        return []
    own = steps.median_us(n, "acode-normal") - steps.median_us(n, "bare-normal")
    room = (STEP_VS_BARE - 1) * steps.median_us(n, "bare-full")
    if own <= room:
        return []
    return [
        f"- The {STEP_VS_BARE:g}x target leaves acode's own work {_us(room)} µs a step on this "
        f"disk ({STEP_VS_BARE - 1:g} times the bare FULL insert), and that work alone, "
        f"measured without disk waits, is {_us(own)} µs: no way of writing the step meets it "
        "here. It does not shrink with the fsync, so the faster the disk, the larger its "
        "share of the ratio."
    ]


def _recovery_points(result: SideBySide) -> list[str]:
    rec = result.recovery
    sizes = [n for n in result.settings.recovery_sizes if rec.has(n, BASE)]
    if not sizes:
        return []
    n = sizes[-1]
    loaded, first = rec.median(n, BASE, "loaded_s"), rec.median(n, BASE, "first_new_s")
    bare = rec.median(n, "bare-full", "first_new_s")
    points = [
        f"- Recovery at N = {n:,}: acode has its state {_ms(loaded)} ms after the process "
        f"starts (the bare insert's first new step: {_ms(bare)} ms; the difference is mostly "
        f"importing acode). Replaying the {n // 2:,} completed steps through `s.step` "
        f"({_us(_replay_us(result, n))} µs each), it runs the first new step at "
        f"{_ms(first)} ms: the load stays flat as the history grows, the replay does not."
    ]
    if rec.has(n, SKIP):
        points.append(
            f"- `s.skip_completed()` instead goes on after the completed steps without "
            f"calling them, for a caller who needs none of their results (as the bare "
            f"insert's workflow needs none): first new step at "
            f"{_ms(rec.median(n, SKIP, 'first_new_s'))} ms. It still refuses any step id "
            "the history used, by one lookup in the step id ledger (schema 6), so it stays "
            "flat. The recovery targets are judged on it; the replay is shown beside."
        )
    return points


def _peer_points(result: SideBySide) -> list[str]:
    steps, rec = result.steps, result.recovery
    n = max(result.settings.step_sizes)
    points = []
    if steps.has(n, "acode-normal") and steps.has(n, "bare-normal"):
        own = steps.median_us(n, "acode-normal") - steps.median_us(n, "bare-normal")
        points.append(
            f"- Without waiting for the disk (durability normal against synchronous=NORMAL) "
            f"acode spends about {_us(own)} µs more per step than the bare insert: its own "
            "work (the step's event, its chain hash and the signed checkpoint in its row), "
            "against the fsync that dominates both at durability full."
        )
    if steps.has(n, "lg-counter-sync") and steps.has(n, "dbos-wal"):
        points.append(
            f"- At the same guarantee as acode's default (the step's record durable before "
            f'the next step starts), LangGraph with durability "sync" takes '
            f"{_x(steps.ratio(n, 'lg-counter-sync'))} acode's time per step at {n:,} steps; "
            f"DBOS in WAL mode {_x(steps.ratio(n, 'dbos-wal'))}. LangGraph's default "
            '("async") writes each checkpoint in a background thread while the next step '
            "runs, which is faster but not durable: see the duplicated steps above."
        )
    for key in ("lg-counter",):
        m = result.settings.recovery_sizes[0]
        if rec.has(m, key):
            points.append(
                f"- {_label(rec.peers, key)}: {rec.worst_duplicates(m, key)} of {m // 2:,} "
                'steps ran twice after the kill in the worst run: with durability "async" '
                "the checkpoints it had not yet written were lost with the process; with "
                f'"sync", {rec.worst_duplicates(m, "lg-counter-sync")}.'
            )
    return points
