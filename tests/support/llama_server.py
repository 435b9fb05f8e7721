"""A real model for the end-to-end tests and `make demo-agent`: llama.cpp's
OpenAI-compatible server (llama-cpp-python) serving Gemma 3 270M, on a free port.

Both live in their own virtual environment, built by `make test` / `make demo-agent`
(the ``$(LLM_VENV)/.installed`` stamp of the Makefile): ``<repo>/.venv-llm`` unless
``ACODE_LLM_VENV`` names another, with the model assembled at
``<venv>/models/gemma-3-270m-q4_k_m.gguf``. ::

    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    with LlamaServer() as server:
        settings = ModelSettings(base_url=server.base_url, name=server.model)

The model is the base (not instruction-tuned) Gemma: it proves the machinery, not the
answers. Its GGUF has no chat template, so the chat format is always given (docs/testing.md,
"The local model"): ``acode-chatml-function-calling``, which
tests/support/llama_launch.py installs, llama-cpp-python's ``chatml-function-calling``
with a template that shows the model tool results (the library's drops them).
``LlamaServer(prompt_log=path)`` has the server append every prompt it gives the model
to ``path``, a JSON object per line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = [
    "MODEL_ALIAS",
    "MODEL_FILE",
    "PROMPT_LOG_VARIABLE",
    "VENV_VARIABLE",
    "LlamaServer",
    "available",
    "default_venv",
    "unavailable_reason",
]

REPO = Path(__file__).resolve().parents[2]
VENV_VARIABLE = "ACODE_LLM_VENV"
# Read when this module is imported, before tests/conftest.py clears ACODE_* for each test.
_GIVEN_VENV = os.environ.get(VENV_VARIABLE) or None
MODEL_FILE = Path("models") / "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma-3-270m"
# Registered by llama_launch.py (its CHAT_FORMAT), which the plain server does not know.
CHAT_FORMAT = "acode-chatml-function-calling"
# Read by llama_launch.py: the file its server appends each prompt to.
PROMPT_LOG_VARIABLE = "ACODE_LLM_PROMPT_LOG"
_BUILD_HINT = "run `make test` or `make demo-agent`, which build it (about 3.5 min the first time)"


def default_venv() -> Path:
    """The model's virtual environment: $ACODE_LLM_VENV, else <repo>/.venv-llm."""
    return Path(_GIVEN_VENV) if _GIVEN_VENV else REPO / ".venv-llm"


def unavailable_reason(venv: Path | None = None) -> str | None:
    """Why the real model cannot be served from ``venv``, or None when it can."""
    venv = venv or default_venv()
    python = venv / "bin" / "python"
    if not python.exists():
        return f"no model environment at {venv} ({VENV_VARIABLE} names another): {_BUILD_HINT}"
    if not (venv / MODEL_FILE).is_file():
        return f"no model file at {venv / MODEL_FILE}: {_BUILD_HINT}"
    return None


def available(venv: Path | None = None) -> bool:
    return unavailable_reason(venv) is None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """llama.cpp's server as a subprocess in its own process group, stopped on exit."""

    def __init__(
        self,
        venv: Path | None = None,
        *,
        port: int = 0,
        n_ctx: int = 2048,
        start_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        prompt_log: Path | None = None,
    ) -> None:
        self.venv = venv or default_venv()
        self.port = port or _free_port()
        self.model = MODEL_ALIAS
        self.n_ctx = n_ctx
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.prompt_log = prompt_log
        self._proc: subprocess.Popen[bytes] | None = None
        self._output: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            str(self.venv / "bin" / "python"),
            str(Path(__file__).with_name("llama_launch.py")),  # the server, with its fixes
            "--model",
            str(self.venv / MODEL_FILE),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--chat_format",
            CHAT_FORMAT,
            "--model_alias",
            self.model,
            "--verbose",
            "False",
        ]

    def start(self) -> LlamaServer:
        reason = unavailable_reason(self.venv)
        if reason is not None:
            raise RuntimeError(reason)
        # A file, not a pipe: nobody reads the server's chatter while it runs, and a full
        # pipe would stall it; its tail explains a failed start. Removed by stop().
        handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        self._output = Path(name)
        env = dict(os.environ)
        # Only when asked: a variable left in the caller's shell would grow a file forever.
        env.pop(PROMPT_LOG_VARIABLE, None)
        if self.prompt_log is not None:
            env[PROMPT_LOG_VARIABLE] = str(self.prompt_log)
        try:
            self._proc = subprocess.Popen(
                self.command(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(handle)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while not self._answers():
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"the model server exited with status {self._proc.returncode} "
                    f"before it answered:\n{self.output_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the model server did not answer GET {self.base_url}/models within "
                    f"{self.start_timeout:.0f} s:\n{self.output_tail()}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.base_url}/models", timeout=2) as reply:
                return int(reply.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def output_tail(self, lines: int = 20) -> str:
        """The end of what the server printed, for a failure message."""
        if self._output is None or not self._output.exists():
            return ""
        text = self._output.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait(self.stop_timeout)
        if self._output is not None:
            self._output.unlink(missing_ok=True)
            self._output = None

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], signum: signal.Signals) -> None:
        # The whole group: the server process and anything it started.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
