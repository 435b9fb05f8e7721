"""Starts llama-cpp-python's OpenAI-compatible server with one fix, for the tests and the
demo: run by the Python of `.venv-llm`, never imported by acode.

On the tool-calling path of ``chatml-function-calling`` (``tool_choice: "auto"``),
llama-cpp-python 0.3.36 calls the model with ``max_tokens=None`` whatever the request
asked (llama_chat_format.py, the three ``create_completion`` calls of
``chatml_function_calling``), so a small model can write a tool call's arguments until
the context is full: minutes on 2 cores. Such calls are capped here at
``ACODE_LLM_MAX_TOKENS`` tokens (default 256), as the request's ``max_tokens`` would.
Everything else is the unmodified server: ``python llama_launch.py ARGS`` takes the
arguments of ``python -m llama_cpp.server``.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

import llama_cpp  # type: ignore[import-not-found]

_CAP = int(os.environ.get("ACODE_LLM_MAX_TOKENS", "256"))
_original = llama_cpp.Llama.create_completion


def _capped(self: Any, *args: Any, **kwargs: Any) -> Any:
    if kwargs.get("max_tokens", 0) is None:
        kwargs["max_tokens"] = _CAP
    return _original(self, *args, **kwargs)


llama_cpp.Llama.create_completion = _capped

if __name__ == "__main__":
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
