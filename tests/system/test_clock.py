"""The system clock's randomness: the operating system's bytes, read in blocks, never
handed out twice, and never shared between a process and its forked child."""

from __future__ import annotations

import os

from acode.system.clock import SystemClock


def test_bytes_are_never_handed_out_twice() -> None:
    clock = SystemClock()
    chunks = [clock.random_bytes(10) for _ in range(2000)]  # several blocks
    assert all(len(c) == 10 for c in chunks)
    assert len(set(chunks)) == len(chunks)
    assert len(clock.random_bytes(5000)) == 5000  # more than a block at once


def test_a_forked_child_does_not_reuse_its_parents_bytes() -> None:
    clock = SystemClock()
    clock.random_bytes(10)  # the parent holds a block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next bytes and leave at once
        os.write(write, clock.random_bytes(10))
        os._exit(0)
    os.close(write)
    child = os.read(read, 10)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 10
    assert clock.random_bytes(10) != child
