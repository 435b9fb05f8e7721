"""Frozen dataclasses made without their generated ``__init__``, on the path of every step
and in decoding a recorded plan: the one place that does it.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, which
costs several times an ordinary assignment: the step path built some 45 fields that way,
a sixth of its own work. Filling the instance's ``__dict__`` in one call keeps the value
exactly as frozen, at a fraction of the cost.

Only for frozen dataclasses without ``__slots__``; a ``__post_init__`` does not run, so
the caller sets what it would derive. Nothing
checks the names given here (the constructor would): each use is pinned by a test that
compares its value with the constructor's.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["build", "evolve"]

T = TypeVar("T")


def build(cls: type[T], /, **fields: Any) -> T:
    """``cls(**fields)``, every field named."""
    value = object.__new__(cls)
    value.__dict__.update(fields)
    return value


def evolve(value: T, /, **changes: Any) -> T:
    """``dataclasses.replace(value, **changes)``. What else ``value`` keeps in its
    ``__dict__`` (a cached text, say) comes along: such a cache must hold the values it
    was made from, to be checked before use."""
    new = object.__new__(type(value))
    fields = new.__dict__
    fields.update(value.__dict__)
    fields.update(changes)
    return new
