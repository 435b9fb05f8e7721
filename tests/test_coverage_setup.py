"""The coverage `make test` measures (docs/testing.md "Coverage"): the `acode` processes
the tests start are measured, a python process that never imports acode prints nothing
of it, and a process killed with SIGKILL (the crash tests kill hundreds) leaves nothing
that stops the data files from being combined."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from coverage import Coverage, CoverageData

REPO = Path(__file__).resolve().parents[1]
ACODE = Path(sys.executable).with_name("acode")


@pytest.fixture
def measured(tmp_path: Path) -> tuple[Coverage, dict[str, str]]:
    """The project's coverage settings with the data files under ``tmp_path``, and the
    environment that starts coverage in a child, as the subprocess patch makes it."""
    cov = Coverage(data_file=str(tmp_path / ".coverage"), config_file=str(REPO / "pyproject.toml"))
    cov.load()  # reads the configuration; measures nothing in this process
    env = {**os.environ, "COVERAGE_PROCESS_CONFIG": cov.config.serialize()}
    return cov, env


def _data_files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(".coverage.*"))


def test_the_settings_measure_branches_in_subprocesses() -> None:
    cov = Coverage(config_file=str(REPO / "pyproject.toml"))
    assert cov.get_option("run:branch") is True
    assert cov.get_option("run:parallel") is True
    assert "subprocess" in cov.get_option("run:patch")  # type: ignore[operator]
    assert cov.get_option("run:source") == ["acode"]


def test_an_acode_process_is_measured(
    tmp_path: Path, measured: tuple[Coverage, dict[str, str]]
) -> None:
    _, env = measured
    subprocess.run([str(ACODE), "--help"], env=env, capture_output=True, check=True, cwd=tmp_path)
    [written] = _data_files(tmp_path)
    data = CoverageData(str(written))
    data.read()
    app = str(REPO / "acode" / "cli" / "app.py")
    assert app in data.measured_files()
    assert data.has_arcs()  # branch coverage


def test_a_python_process_without_acode_prints_nothing_of_coverage(
    tmp_path: Path, measured: tuple[Coverage, dict[str, str]]
) -> None:
    _, env = measured
    done = subprocess.run(
        [sys.executable, "-c", "print('hello')"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert (done.stdout, done.stderr) == ("hello\n", "")


def test_killed_processes_do_not_stop_the_combining(
    tmp_path: Path, measured: tuple[Coverage, dict[str, str]]
) -> None:
    cov, env = measured
    subprocess.run([str(ACODE), "--help"], env=env, capture_output=True, check=True, cwd=tmp_path)
    [good] = _data_files(tmp_path)
    killed = subprocess.Popen([str(ACODE), "--help"], env=env, stdout=subprocess.DEVNULL)
    time.sleep(0.05)  # most likely killed before its save: it leaves no data file
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    # What a kill during a data file's save (coverage writes it with journal_mode=off)
    # can leave: part of the database, or an empty file.
    (tmp_path / ".coverage.host.pid1.Xcut.a").write_bytes(good.read_bytes()[:8192])
    (tmp_path / ".coverage.host.pid2.Xempty.a").write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cov.combine()
    cov.save()
    assert str(REPO / "acode" / "cli" / "app.py") in cov.get_data().measured_files()
    assert not good.exists()  # combined, then removed
    named = " ".join(str(w.message) for w in caught)
    assert ".Xcut." in named  # warned of, not raised
    assert ".Xempty." in named
    # The broken files stay (named in the warnings) until the next run erases them.
    cov.erase()
    assert _data_files(tmp_path) == []
