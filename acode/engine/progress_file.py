"""The progress file: one session as a person reads it, in markdown (docs/progress-file.md).

``.agent/state/sessions/<id>/progress.md`` says where a session stands: what it is, the
configuration it runs with, the conversation, the results of its steps and what is left.
It is a view, never a source: resume reads the database, and nothing reads this file back.
That is why writing it may fail without harm, and why it may leave things out to stay
small (long texts are cut, only the newest messages, results and step ids are shown); the
complete record is ``acode session export ID --format json``. Rendering reads the newest
steps backwards from the end of the history, not every step, so that a long session's
renders cost about what a short one's do.

Every text in it passes through the redactor before it is written (invariant 7, docs/invariants.md).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.domain.reducer import SessionSummary, StepRecord, StepStatus
from acode.domain.states import is_terminal
from acode.engine.catalog import recorded_config, recorded_plan
from acode.engine.journal import Journal
from acode.security.redaction import redact, redact_blocks, redact_json
from acode.store.base import EventStore
from acode.store.records import MessageRow, SessionRow
from acode.system.files import atomic_write
from acode.system.workspace import StatePaths

# What only writing the file needs (usage, marks) loads with the first write: a resume's
# dry run reads the file's checkpoint line alone (``recorded_checkpoint``).
if TYPE_CHECKING:
    from acode.domain.marks import Mark
    from acode.domain.plan import Plan
    from acode.domain.usage import Usage

__all__ = [
    "PROGRESS_FILE_NAME",
    "ProgressFile",
    "iso_time",
    "progress_path",
    "recorded_checkpoint",
    "render_progress",
]

PROGRESS_FILE_NAME = "progress.md"
CUT_AT = 2000  # characters of one message or one result string shown in full
RUN_TAIL_LINES = 20
# The file is rewritten up to once a second: its cost must not grow with the session.
SHOWN_MESSAGES = 200
SHOWN_RESULTS = 20
SHOWN_STEPS = 200  # the newest steps the execution state lists by id
SHOWN_MARKS = 10
_ROLES = {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"}
_BACKTICKS = re.compile("`+")


# -- redaction -----------------------------------------------------------------------------


# -- rendering -----------------------------------------------------------------------------


def iso_time(us: int, *, precise: bool = False) -> str:
    """UTC ISO 8601 of a microsecond timestamp; ``precise`` keeps the microseconds."""
    moment = datetime.fromtimestamp(us / 1e6, UTC)
    if precise:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def render_progress(
    store: EventStore,
    row: SessionRow,
    summary: SessionSummary,
    *,
    now_us: int,
    usage: Usage | None = None,
    marks: Sequence[Mark] | None = None,
) -> str:
    """The progress file of a session, as of ``summary``, written at ``now_us``;
    ``usage`` and ``marks``: its model calls' usage and its marked checkpoints, when the
    caller keeps them as it goes."""
    from acode.engine.catalog import model_usage
    from acode.engine.marks import session_marks

    plan = recorded_plan(store, row)
    newest = store.newest_steps(row, max(SHOWN_RESULTS, SHOWN_STEPS))
    # Steps left unfinished have a row in `steps` (schema 4), wherever they are.
    known = {r.position: r for r in store.unfinished_steps(row.sid)}
    known.update((r.position, r) for r in newest)
    records = [known[p] for p in sorted(known)]
    sections = [
        f"# Session progress - {_one_line(row.title)}",
        _metadata(
            store,
            row,
            summary,
            plan,
            now_us,
            model_usage(store, row) if usage is None else usage,
            session_marks(store, row) if marks is None else marks,
        ),
        _configuration(row),
        _conversation(store, row),
        _tool_results(store, row, summary, records),
        _execution_state(summary, records, _pending(store, row, plan)),
    ]
    return "\n\n".join(sections) + "\n"


_CHECKPOINT_LINE = re.compile(
    r"^- \*\*Last Checkpoint\*\*: .*\(checkpoint \d+, event (\d+)\)$", re.M
)


def progress_path(paths: StatePaths, session_id: str) -> Path:
    """Where the progress file of the session ``session_id`` is."""
    return paths.session_dir(session_id) / PROGRESS_FILE_NAME


def recorded_checkpoint(path: Path) -> int | None:
    """The event of the newest checkpoint the progress file at ``path`` names: a later
    position of the history than its database may hold, if the history was cut short."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _CHECKPOINT_LINE.search(text)
    return int(found.group(1)) if found else None


def _one_line(text: str) -> str:
    # A newline in a title would end the heading or the list item it sits in.
    return " ".join(redact(text).split())


def _metadata(
    store: EventStore,
    row: SessionRow,
    summary: SessionSummary,
    plan: Plan | None,
    now_us: int,
    usage: Usage,
    marks: Sequence[Mark],
) -> str:
    newest = store.newest_checkpoint(row)
    if newest is not None:
        checkpoint = f"{iso_time(newest.created_at)} (checkpoint {newest.id}, event {newest.seq})"
    else:
        checkpoint = "none"
    plan_title = _one_line(plan.title) if plan else "none (steps are recorded as they run)"
    short = row.short_id or store.short_id(row.id)
    lines = [
        "## Execution Metadata",
        "",
        f"- **Session**: {row.id} (`{short}`)",
        f"- **Plan**: {plan_title}",
        f"- **Started**: {iso_time(row.created_at)}",
        f"- **Last Checkpoint**: {checkpoint}",
        *_marked(marks),
        f"- **Status**: {summary.state.value.lower()}",
        f"- **Reason**: {_one_line(summary.reason) if summary.reason else 'none'}",
        f"- **Written**: {iso_time(now_us)}",
    ]
    if usage.calls:
        cost = f"${usage.cost_usd:.4f}" if usage.cost_usd is not None else "no price configured"
        lines.append(
            f"- **Model Usage**: {usage.calls} calls, {usage.prompt_tokens} prompt + "
            f"{usage.completion_tokens} completion tokens; cost {cost}"
        )
    return "\n".join(lines)


def _marked(marks: Sequence[Mark]) -> list[str]:
    if not marks:
        return []
    shown = [
        f"{_quoted(m.label)} (event {m.seq}, {iso_time(m.ts_us)})" for m in marks[-SHOWN_MARKS:]
    ]
    earlier = f"{len(marks) - SHOWN_MARKS} earlier, then " if len(marks) > SHOWN_MARKS else ""
    return [f"- **Marked Checkpoints**: {earlier}{', '.join(shown)}"]


def _quoted(label: str) -> str:
    return json.dumps(_one_line(label), ensure_ascii=False)


def _configuration(row: SessionRow) -> str:
    config = recorded_config(row)
    settings: dict[str, object] = {
        "model": config.model.name,
        "provider": config.model.base_url,
        "temperature": config.model.temperature,
        "max_tokens": config.model.max_tokens,
        "durability": config.durability,
    }
    # A JSON string or number is also a valid YAML scalar, quoting and escapes included.
    body = "\n".join(
        f"{key}: {json.dumps(redact_json(value), ensure_ascii=False)}"
        for key, value in settings.items()
    )
    return f"## Configuration\n\n{_fence(body, 'yaml')}"


def _conversation(store: EventStore, row: SessionRow) -> str:
    messages = store.messages(row.sid)
    parts = ["## Conversation History"]
    if not messages:
        parts.append("_No messages yet._")
    hidden = len(messages) - SHOWN_MESSAGES
    if hidden > 0:
        parts.append(
            f"_Messages 1 to {hidden} are not shown here; "
            f"`acode session export {row.short_id or row.id} --format json` has them all._"
        )
        messages = messages[hidden:]
    parts.extend(_message(m) for m in messages)
    return "\n\n".join(parts)


def _message(message: MessageRow) -> str:
    role = _ROLES.get(message.role, _one_line(message.role).capitalize())
    heading = f"### Message {message.idx + 1} ({role})"
    try:
        data: Any = json.loads(message.content)
    except ValueError:
        data = message.content
    if isinstance(data, dict) and isinstance(data.get("content"), str):
        text = data["content"]
        extra = {k: v for k, v in data.items() if k not in ("role", "content")}
    else:
        text, extra = None, data
    blocks = [heading]
    if text is not None:
        blocks.append(_fence(_cut(redact(text)), "text"))
    if extra:
        blocks.append(_json_block(extra))
    return "\n\n".join(blocks)


def _tool_results(
    store: EventStore, row: SessionRow, summary: SessionSummary, records: Sequence[StepRecord]
) -> str:
    finished = [r for r in records if r.status in (StepStatus.COMPLETED, StepStatus.FAILED)]
    finished = finished[-SHOWN_RESULTS:]
    parts = ["## Tool Results"]
    if not finished:
        parts.append("_No step has finished yet._")
    hidden = summary.steps_completed + summary.steps_failed - len(finished)
    if hidden > 0:
        parts.append(
            f"_The results of the first {hidden} finished steps are not shown here; "
            f"`acode session export {row.short_id or row.id} --format json` has them all._"
        )
    events = store.events_at(row, [r.event_seq for r in finished])
    for record in finished:
        event = events[record.event_seq]
        entry: dict[str, Any] = {"step": record.step_id, "kind": record.kind}
        if record.status is StepStatus.COMPLETED:
            entry["result"] = _shown_result(record.kind, event.payload.get("result"))
        else:
            entry["status"] = "failed"
            entry["error"] = event.payload.get("error")
        entry["timestamp"] = iso_time(event.ts_us)
        parts.append(_json_block(entry))
    return "\n\n".join(parts)


def _shown_result(kind: str, result: Any) -> Any:
    if kind != "run" or not isinstance(result, dict) or "stdout" not in result:
        return result
    shown: dict[str, Any] = {"exit_code": result.get("exit_code")}
    for stream in ("stdout", "stderr"):
        text = str(result.get(stream) or "")
        if not text and stream == "stderr":
            continue
        lines = text.splitlines()
        # A private key spans many lines, and a line of its body alone cannot be told
        # from other base64: masked before the cut (each line is redacted when shown).
        tail = redact_blocks("\n".join(lines[-RUN_TAIL_LINES:])).splitlines()
        shown[stream] = tail  # a list: one line of output per line of JSON
        if len(lines) > RUN_TAIL_LINES:
            shown[f"{stream}_lines_not_shown"] = len(lines) - RUN_TAIL_LINES
    if result.get("truncated"):
        shown["truncated"] = True  # acode itself kept only the end of a long output
    shown["duration_ms"] = result.get("duration_ms")
    return shown


def _pending(store: EventStore, row: SessionRow, plan: Plan | None) -> list[str] | None:
    """The ids of the plan's steps that never started (None: no recorded plan), each
    looked up in the step id ledger and among the newest ids it does not hold yet."""
    if plan is None:
        return None
    newest = set(store.unledgered_step_ids(row))
    return [
        s.id for s in plan.steps() if s.id not in newest and not store.has_step_id(row.sid, s.id)
    ]


def _execution_state(
    summary: SessionSummary, records: Sequence[StepRecord], pending: list[str] | None
) -> str:
    def ids(status: StepStatus) -> list[str]:
        return [r.step_id for r in records if r.status is status]

    in_progress = ids(StepStatus.IN_PROGRESS) + ids(StepStatus.ROLLED_BACK)
    current, current_id = _current_step(summary, records, pending or [])
    total = str(summary.total_steps) if summary.total_steps is not None else "unknown"
    where = f" (`{_one_line(current_id)}`)" if current_id else ""
    lines = [
        "## Execution State",
        "",
        f"- Current step: {current} of {total}{where}",
        f"- Completed: {_completed(summary, ids(StepStatus.COMPLETED))}",
    ]
    if in_progress:
        lines.append(f"- In progress: {_id_list(in_progress)}")
    lines.append(f"- Failed: {_id_list(ids(StepStatus.FAILED))}")
    if pending is None:
        lines.append("- Pending: [] (no recorded plan: steps become known as they run)")
    else:
        lines.append(f"- Pending: {_id_list(pending)}")
    lines.append("- Variables: {}")
    return "\n".join(lines)


def _current_step(
    summary: SessionSummary, records: Sequence[StepRecord], pending: Sequence[str]
) -> tuple[int, str | None]:
    """The 1-based number and id of the step the session is at: the unfinished one, else
    the next to run, else (at the end) the last one that ran."""
    last = records[-1] if records else None
    if last is not None and last.status is not StepStatus.COMPLETED:
        return last.position + 1, last.step_id
    if pending and not is_terminal(summary.state):
        return summary.next_position + 1, pending[0]
    return summary.next_position, last.step_id if last else None


def _completed(summary: SessionSummary, shown: list[str]) -> str:
    listed = shown[-SHOWN_STEPS:]
    if summary.steps_completed <= len(listed):
        return _id_list(listed)
    return (
        f"{summary.steps_completed:,} steps; the newest {len(listed)}: {_id_list(listed)} "
        "(`acode session export` lists them all)"
    )


def _id_list(values: Sequence[str]) -> str:
    return json.dumps(redact_json(list(values)), ensure_ascii=False)


def _cut(text: str) -> str:
    """``text``, or its first CUT_AT characters and a note. Cut only redacted text:
    a secret cut in half no longer has the shape the redactor knows."""
    if len(text) <= CUT_AT:
        return text
    return f"{text[:CUT_AT]}\n... [{len(text) - CUT_AT} more characters not shown]"


def _shorten(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    return value


def _json_block(value: Any) -> str:
    text = json.dumps(_shorten(redact_json(value)), indent=2, ensure_ascii=False)
    if len(text) > 4 * CUT_AT:  # many short strings still make a long block
        text = _cut(text)
    return _fence(text, "json")


def _fence(text: str, language: str) -> str:
    """A fenced block that ``text`` cannot close early, whatever backticks it holds."""
    longest = max(map(len, _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


# -- writing -------------------------------------------------------------------------------


class ProgressFile:
    """Keeps one session's progress file current: each ``update`` rewrites it atomically,
    at most once per ``min_interval_s`` (longer for very long sessions) unless it is the
    ``final`` one (pause, failure, completion). Use one instance per session: the
    interval is the instance's.

    An update renders on the caller's thread (it reads the session's connection) and
    writes on its own: the write's two fsyncs and rename took most of a rewrite's time,
    and a step has no reason to wait for a view. One write is in flight at most; an
    update due while it is skips, and the next step tries again. A ``final`` update
    waits for it and writes at once, and ``flush`` waits for it, so that what a session
    leaves behind is on disk when it stops."""

    def __init__(
        self, paths: StatePaths, *, min_interval_s: float = 1.0, max_share: float = 0.01
    ) -> None:
        from acode.domain.usage import Usage

        self._paths = paths
        self._min_interval_s = min_interval_s
        self._max_share = max_share
        self._next_due: float | None = None
        # The session's model usage up to event _usage_seq: each update adds the calls
        # since, so that a render does not read the whole history.
        self._usage = Usage()
        self._usage_seq = 0
        self._marks: list[Mark] = []  # likewise, the marked checkpoints
        self._writer: threading.Thread | None = None
        self._failure: BaseException | None = None  # a write's, raised on the caller's side

    def path(self, session_id: str) -> Path:
        return progress_path(self._paths, session_id)

    def update(self, journal: Journal, *, final: bool = False) -> Path | None:
        """Rewrite the progress file; the path being written, or None when skipped or
        failed (a failed write in the background is noticed by the next update)."""
        from acode.domain.usage import total_usage
        from acode.engine.marks import session_marks

        started = time.monotonic()
        if final:
            self.flush()
        elif self._writing() or (self._next_due is not None and started < self._next_due):
            return None
        self._raise_failure()
        summary = journal.summary
        assert summary is not None  # a journal has a summary once its session exists
        store, row = journal.store, journal.row
        self._usage += total_usage(store.model_results(row, self._usage_seq, summary.seq))
        self._marks += session_marks(store, row, self._usage_seq)
        self._usage_seq = summary.seq
        text = render_progress(
            store,
            row,
            summary,
            now_us=time.time_ns() // 1000,
            usage=self._usage,
            marks=self._marks,
        )
        target = self.path(journal.session_id)
        data = text.encode("utf-8")
        if final:
            return target if self._write(target, data, started) else None
        self._writer = threading.Thread(
            target=self._write, args=(target, data, started), name="acode-progress-file"
        )
        self._writer.start()
        return target

    def flush(self) -> None:
        """Wait for the write in flight, if any."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        self._raise_failure()

    def _writing(self) -> bool:
        return self._writer is not None and self._writer.is_alive()

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _write(self, target: Path, data: bytes, started: float) -> bool:
        try:
            # The file is redacted, but it is a session's story: its owner's alone.
            atomic_write(target, data, private=True)
        except OSError:
            # The file is a view of the database, which already holds everything it says:
            # a full disk or a read-only directory must not fail or pause the session.
            # The old file (or none) stays whole, and the next update tries again.
            return False
        except BaseException as exc:  # a defect: the caller's thread reports it
            self._failure = exc
            return False
        finally:
            # Rendering grows with the session; waiting in proportion to what it took keeps
            # the progress file under max_share of a long run's time, however long.
            spent = time.monotonic() - started
            self._next_due = started + max(self._min_interval_s, spent / self._max_share)
        return True
