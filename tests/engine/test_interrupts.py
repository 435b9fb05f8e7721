"""A pause request, from a real SIGINT sent to this process: delivered at once inside a
step's function, and only at the next boundary outside it."""

from __future__ import annotations

import os
import signal

import pytest

from acode.engine.interrupts import Interrupts
from acode.errors import PauseRequested


def _ctrl_c(value: int) -> int:
    os.kill(os.getpid(), signal.SIGINT)
    return value  # not reached: the handler raises in the function


def test_a_function_called_interruptibly_stops_at_the_signal() -> None:
    with Interrupts().installed() as interrupts:
        with pytest.raises(PauseRequested):
            interrupts.call(_ctrl_c, 1)
        assert interrupts.requested


def test_after_the_call_a_signal_waits_for_the_next_boundary() -> None:
    with Interrupts().installed() as interrupts:
        assert interrupts.call(lambda n: n + 1, 1) == 2
        with pytest.raises(PauseRequested):
            interrupts.call(_ctrl_c, 1)
        interrupts.requested = False  # the pause was taken; the run goes on
        os.kill(os.getpid(), signal.SIGINT)  # between steps: noted, not raised
        assert interrupts.requested
        with pytest.raises(PauseRequested):
            interrupts.check()


def test_a_request_made_before_the_call_stops_it_before_the_function_runs() -> None:
    interrupts = Interrupts()
    interrupts.requested = True
    ran: list[int] = []
    with pytest.raises(PauseRequested):
        interrupts.call(ran.append, 1)
    assert ran == []


def test_a_function_that_raises_leaves_the_block() -> None:
    def fails(_: int) -> int:
        raise KeyError("no")

    with Interrupts().installed() as interrupts:
        with pytest.raises(KeyError):
            interrupts.call(fails, 1)
        os.kill(os.getpid(), signal.SIGINT)  # outside any block now: not raised
        assert interrupts.requested
