"""JSON that comes from outside (a breadcrumb, a task file, a model server's answer),
read into values acode can keep.

Python's ``json.loads`` accepts more than acode can record: NaN and infinities (the
canonical JSON of the event log refuses them), half a UTF-16 surrogate pair escaped as
``\\ud800`` (no UTF-8 text can hold it, so writing it fails), and nesting as deep as the
interpreter's stack (a RecursionError there, or in whatever walks the value next).
``read_json`` refuses all of them with a ValueError that says what is wrong.

Pure.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

__all__ = ["MAX_JSON_DEPTH", "read_json"]

# Far beyond anything a person, an engine or a model server sends, far below the stack.
MAX_JSON_DEPTH: Final = 100
# Only an escape can put a surrogate into a decoded string: valid UTF-8 holds none.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]", re.ASCII)


def read_json(raw: str | bytes, *, replace_surrogates: bool = False) -> Any:
    """The value of the JSON text ``raw``. Raises ValueError for text that is not JSON,
    NaN or an infinite number, nesting deeper than MAX_JSON_DEPTH, and a lone surrogate,
    which ``replace_surrogates`` replaces by U+FFFD instead (a broken character in text
    a program produced, as a UTF-8 decoder shows one)."""
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError as exc:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from exc
    if isinstance(raw, str):
        # A str may also hold them as they are (a command-line argument that was not UTF-8).
        check_surrogates = not _encodable(raw) or _SURROGATE_ESCAPE.search(raw.encode()) is not None
    else:
        check_surrogates = _SURROGATE_ESCAPE.search(raw) is not None
    if not _walk(value, check_surrogates):
        return value
    if not replace_surrogates:
        raise ValueError("it holds half a UTF-16 surrogate pair (an escape such as \\ud800)")
    # Pairs are single characters in a str already: only lone halves are replaced.
    text = json.dumps(value, ensure_ascii=False)
    return json.loads(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


def _walk(value: Any, check_surrogates: bool) -> bool:
    """Whether ``value`` holds a lone surrogate (looked for when ``check_surrogates``);
    raises ValueError when it is nested too deeply. A loop, not a recursion: the depth is
    what is being checked."""
    found = False
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            if check_surrogates and isinstance(item, str) and not _encodable(item):
                found = True
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        pending.extend((child, depth + 1) for child in children)
    return found


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:20]} is out of range")
    return number
