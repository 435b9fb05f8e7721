"""A lost machine: worker A and its session's process in a pid namespace of their own
(another machine, as tests/cli/test_store_lease.py has it), killed together with SIGKILL,
so that nothing is given back: neither the item's lease in the queue nor the session's
lease in the store. Worker B, in another directory, claims the item when the first
lapses, is refused while the second runs (`waiting`), and resumes the session just after
it lapses, by the store's clock: one refusal, not a try every back-off. The item ends
done once, no step ran twice, and its branch is an uninterrupted run's. Real workers, a
real PostgreSQL, a bare repository on disk."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_store_lease import ELSEWHERE
from tests.fleet.conftest import ACODE, Fleet, git, reference_tree, write_plan
from tests.fleet.test_shared_store import _completed_steps, _napping_plan

__all__: list[str] = []

# How long after the item's lease the session's lapses: its last renewal came after its
# worker's (each is renewed every third of a lease by its own process).
LATER_S = 4


def _worker_elsewhere(fleet: Fleet, name: str) -> subprocess.Popen[str]:
    """A worker on another machine: the first process of a pid namespace of its own, so
    that a SIGKILL of it is the kernel's SIGKILL of its sessions too."""
    home = fleet.home(name)
    proc = subprocess.Popen(
        [*ELSEWHERE, ACODE, "worker", "-w", str(home), "--json"],
        cwd=home,
        env=fleet.env(),
        stdout=(home / "worker.out").open("w"),
        stderr=(home / "worker.err").open("w"),
        text=True,
        start_new_session=True,
    )
    fleet.procs.append(proc)
    return proc


def _count_takes(fleet: Fleet) -> None:
    """Each try to take the session's lease (acode resume's INSERT ... ON CONFLICT, taken
    or not) leaves a row in public.takes."""
    fleet.execute("CREATE TABLE public.takes (at timestamptz DEFAULT clock_timestamp())")
    fleet.execute(
        "CREATE FUNCTION public.count_take() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN INSERT INTO public.takes DEFAULT VALUES; RETURN NEW; END $$"
    )
    fleet.execute(
        "CREATE TRIGGER count_take BEFORE INSERT ON acode_store.session_leases"
        " FOR EACH ROW EXECUTE FUNCTION public.count_take()"
    )


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_lost_machines_session_is_resumed_just_after_its_lease_in_the_store_lapses(
    fleet: Fleet, bare_repo: Path
) -> None:
    probe = subprocess.run([*ELSEWHERE, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    effects, marker = fleet.root / "effects", fleet.root / "napped"
    plan = _napping_plan(fleet.root / "plan1.yaml", effects, marker)
    tree = reference_tree(
        fleet, bare_repo, write_plan(fleet.root / "ref1.yaml", 1, fleet.root / "ref-fx"), "ref1"
    )
    # By TCP, as the queue is (fleet.url): the server's socket file is out of reach of a
    # user namespace.
    fleet.extra_env = {"ACODE_STORE_URL": fleet.pg.url_via(fleet.proxy.port, fleet.dbname)}
    assert fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo)).returncode == 0
    a = _worker_elsewhere(fleet, "a")
    fleet.wait_for("the session to nap", marker.exists)
    (item,) = fleet.items()
    session = item["session_id"]
    fleet.wait_for(
        "the work tree's ref on the remote",
        lambda: git(bare_repo, "for-each-ref", f"refs/acode/sessions/{session}") != "",
    )
    # Same host name, another machine (its own pid namespace): named another one on the
    # item, as two machines' names differ.
    fleet.execute("UPDATE acode_fleet.queue_items SET session_host = 'machine-a'")

    # unshare and the namespace's first process, the worker: the kernel kills the rest.
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    fleet.execute(
        "UPDATE acode_store.session_leases SET expires = (SELECT lease_expires"
        " FROM acode_fleet.queue_items) + make_interval(secs => %s)",
        (LATER_S,),
    )
    _count_takes(fleet)
    b = fleet.worker("b", "--once")

    assert b.wait(120) == 0
    events = fleet.output("b")
    waiting = [e for e in events if e["event"] == "waiting"]
    assert len(waiting) == 1, events
    assert "ACODE-RESUME-003" in waiting[0]["reason"]
    assert f"session {session[:13]} is running on another machine" in waiting[0]["reason"]
    # B's tries: the one refused, and the one just after the lapse; none between.
    assert fleet.query("SELECT count(*) FROM public.takes")[0][0] == 2
    (item,) = fleet.items()
    assert (item["state"], item["epoch"], item["session_id"]) == ("done", 2, session), item
    assert [e["event"] for e in events if e["event"] in ("done", "failed")] == ["done"]
    assert git(bare_repo, "rev-parse", f"{item['result_branch']}^{{tree}}") == tree
    assert sorted(effects.read_text().splitlines()) == ["1-e1", "1-e2"], "a step ran twice"
    assert sorted(_completed_steps(fleet)) == sorted(["w1", "e1", "slow", "e2", "c", "w2"])
    (epoch,) = fleet.query("SELECT epoch FROM acode_store.session_leases")[0]
    assert epoch == 2
