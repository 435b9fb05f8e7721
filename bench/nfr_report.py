"""The sections of docs/benchmarks.md on NFR-004 (a step after a resume) and NFR-002 with
the model probe (environment validation against a live and a silent model server)."""

from __future__ import annotations

import statistics

from bench.after_resume import CHUNK, KINDS, AfterResume
from bench.model_probe import BUDGET_SECONDS, SERVERS, ModelProbe

__all__ = ["AFTER_RESUME_TARGET", "render_after_resume", "render_model_probe"]

# NFR-004: a step after a resume costs what it costs in a fresh session, within noise.
AFTER_RESUME_TARGET = 1.1


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def render_after_resume(results: AfterResume) -> str:
    keys = sorted({(d, n) for d, n, _ in results.per_step_us}, key=lambda k: (k[0] != "full", k))
    runs = len(next(iter(results.per_step_us.values())))
    lines = [
        "## A step after a resume (NFR-004)",
        "",
        "No performance degradation against a fresh start: a session killed (SIGKILL) after "
        "N steps, then resumed in a new process, against a fresh session, each recording "
        f"{results.steps:,} new steps, and against a session that was never interrupted, "
        "whose process records N steps before its new ones (so that what a longer session "
        "costs shows apart from what the resume costs). The four run at once, each in its "
        "own process "
        "of the same kind (`bench.peers.acode_driver`, the same durability), taking turns every "
        f"{CHUNK} steps (the order reversing every turn and shifting every round) while the "
        "others are stopped; only the new steps are timed, not the resume or the replay of "
        "the completed steps (those are in the tables below). A resumed session either "
        "calls its completed steps again (they return their recorded results) or skips them "
        f"with `skip_completed()`. Medians of {runs} rounds, each on a fresh copy of the "
        "killed session; x fresh is the median of the rounds' ratios to the fresh "
        "session of the same round.",
        "",
        "| durability | steps done before the kill | session | µs per new step | min - max "
        "| x fresh | x never interrupted |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for durability, done in keys:
        for kind, label in KINDS:
            values = results.per_step_us[(durability, done, kind)]
            fresh, whole = (
                f"{results.ratio(durability, done, kind, base):.2f}"
                for base in ("fresh", "uninterrupted")
            )
            lines.append(
                f"| {durability} | {done:,} | {label} | {_us(statistics.median(values))} "
                f"| {_us(min(values))} - {_us(max(values))} | {fresh} | {whole} |"
            )
    lines += [
        "",
        f"Target: a step of a resumed session within {AFTER_RESUME_TARGET:g}x the fresh "
        "session's (median of the rounds' ratios).",
        "",
        "| durability | steps done before the kill | session | x fresh | per-round ratios | |",
        "|---|---:|---|---:|---|---|",
    ]
    for durability, done in keys:
        for kind, label in KINDS[2:]:
            ratio = results.ratio(durability, done, kind)
            spread = ", ".join(f"{r:.2f}" for r in results.ratios(durability, done, kind))
            lines.append(
                f"| {durability} | {done:,} | {label} | {ratio:.2f} | {spread} "
                f"| {_verdict(ratio <= AFTER_RESUME_TARGET)} |"
            )
    return "\n".join(lines) + "\n"


def _seconds(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({max(values):.2f})"


def render_model_probe(probe: ModelProbe) -> str:
    samples = len(next(iter(probe.preview_seconds.values())))
    lines = [
        "## Environment validation with the model (NFR-002)",
        "",
        "A resume whose remaining step needs the model checks that the model's server "
        "answers. The session: an approval, given, and a `model` step still to run; its "
        "server, tests/support/busy_model.py's OpenAI-compatible one on 127.0.0.1, either "
        "answers at once or takes the connection and never answers (as a hung server "
        "does). `preview_resume()` in-process is the validation (with the load of the "
        "session, a few milliseconds); `acode resume ID --dry-run` adds the process's "
        f"start-up. Seconds, median and (worst) of {samples} runs of each, in turns; "
        f"`resume.validation_timeout_seconds` was {probe.configured_timeout:g} (acode's "
        f"default). NFR-002's budget: {BUDGET_SECONDS:g} s.",
        "",
        "| model server | `preview_resume()` | `acode resume --dry-run` | exit status "
        "| the model reported as | within the budget |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key, label in SERVERS:
        previews = probe.preview_seconds[key]
        statuses = ", ".join(str(s) for s in sorted(probe.statuses[key]))
        verdicts = "; ".join(sorted(probe.verdicts[key]))
        lines.append(
            f"| {label} | {_seconds(previews)} | {_seconds(probe.cli_seconds[key])} "
            f"| {statuses} | {verdicts} | {_verdict(max(previews) <= BUDGET_SECONDS)} |"
        )
    lines += [
        "",
        "Judged on the worst `preview_resume()`: the validation itself, after start-up. "
        "A silent server must also be reported as a problem, not as a pass.",
    ]
    return "\n".join(lines) + "\n"
