"""Starts llama-cpp-python's OpenAI-compatible server with a few fixes, for the tests and
the demo: run by the Python of `.venv-llm`, never imported by acode.
``python llama_launch.py ARGS`` takes the arguments of ``python -m llama_cpp.server``;
everything not named here is the unmodified server of llama-cpp-python 0.3.36.

1. The chat format ``acode-chatml-function-calling`` (``CHAT_FORMAT``): llama-cpp-python's
   ``chatml-function-calling`` handler, whose tool calling works with a small model
   (``tool_choice: "auto"`` and a forced function), with its prompt template fixed
   (``_TEMPLATE``). The template of 0.3.36 renders a ``tool`` message as a bare
   ``<|im_start|>tool`` line: the model never sees a tool's result, so it cannot react
   to a failed call. It also HTML-escapes every message, so the model reads
   ``it&#39;s`` and its own earlier arguments as ``{&#34;path&#34;: ...}``. No other
   built-in format of 0.3.36 does both: ``chatml``, ``gemma`` and the model-template
   (Jinja) handlers drop tool messages or give no tool calls for ``"auto"``;
   ``functionary`` shows tool results but names ``"auto"`` calls after whatever the
   model writes (`` to=call_0``); ``functionary-v1/v2`` need a Hugging Face tokenizer.
2. On the tool-calling path of that handler (``tool_choice: "auto"``), llama-cpp-python
   calls the model with ``max_tokens=None`` whatever the request asked (the three
   ``create_completion`` calls of ``chatml_function_calling``), so a small model can
   write a tool call's arguments until the context is full: minutes on 2 cores. Such
   calls are capped at ``ACODE_LLM_MAX_TOKENS`` tokens (default 256).
3. On a CPU that advertises Intel AMX, ggml's extra weight buffer types (``AMX`` and
   ``CPU_REPACK``; llama.cpp's ``use_extra_bufts``) are turned off: in a Firecracker VM
   whose CPUID lists ``amx_tile`` (and whose kernel grants the tile-data permission) the
   first completion died with SIGILL on ``tilezero``. Plain CPU buffers work anywhere.
4. With ``ACODE_LLM_PROMPT_LOG`` set, each completion's prompt, as the model gets it, is
   appended to that file as a JSON line ``{"prompt": ...}``: the evidence of what a
   chat request showed the model.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp  # type: ignore[import-not-found]
import llama_cpp.llama_chat_format as chat_formats  # type: ignore[import-not-found]
import llama_cpp.llama_cpp as llama_lib  # type: ignore[import-not-found]

CHAT_FORMAT = "acode-chatml-function-calling"  # tests/support/llama_server.py passes it
PROMPT_LOG_VARIABLE = "ACODE_LLM_PROMPT_LOG"

# llama-cpp-python 0.3.36's chatml-function-calling template with three changes: a tool
# message's content and end (the first block), each tool call's arguments ended by a
# newline (the handler writes calls that way, so history looks like what the model
# wrote), and no HTML escaping (``_environment``).
_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'tool' %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'system' %}"
    "{{ message.content }}"
    "{% if tool_calls %}"
    "\n\nYou have access to the following functions:\n"
    "{% for tool in tools %}"
    "\nfunctions.{{ tool.function.name }}:\n"
    "{{ tool.function.parameters | tojson }}"
    "\n{% endfor %}"
    "\n\nYou can respond to users messages with either a single message or one or more "
    "function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following "
    "format:"
    "\n\nmessage:"
    "\n<message>"
    "\n\nTo respond with one or more function calls begin the message with "
    "'functions.<function_name>:', use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'user' %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'assistant' %}"
    "{% if message.content and message.content | length > 0 %}"
    "{% if tool_calls %}"
    "message:\n"
    "{% endif %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if 'tool_calls' in message %}"
    "{% for tool_call in message.tool_calls %}"
    "functions.{{ tool_call.function.name }}:\n"
    "{{ tool_call.function.arguments }}\n"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A sentence of the template replaced (the only place 0.3.36 has it).
_UPSTREAM_MARK = "To respond with one or more function calls begin the message with"

_CAP = int(os.environ.get("ACODE_LLM_MAX_TOKENS", "256"))
_PROMPT_LOG = os.environ.get(PROMPT_LOG_VARIABLE) or None


class _FixedTemplate:
    """Stands in for the Jinja environment ``chatml_function_calling`` compiles its
    template in: compiles ``_TEMPLATE`` instead."""

    def __init__(self, environment: Any) -> None:
        self._environment = environment

    def from_string(self, source: str) -> Any:
        if _UPSTREAM_MARK not in source:
            # Another llama-cpp-python: the template replaced here may have moved on.
            raise RuntimeError(
                f"{CHAT_FORMAT}: llama-cpp-python's chatml-function-calling template is not "
                "the one tests/support/llama_launch.py replaces (written for 0.3.36)"
            )
        return self._environment.from_string(_TEMPLATE)


def _chat_handler() -> Callable[..., Any]:
    """``chatml_function_calling`` itself, run with ``_TEMPLATE``: a copy of the function
    whose Jinja environment is ours, so that the library module stays as it is."""
    upstream: Any = chat_formats.chatml_function_calling
    sandbox = upstream.__globals__["ImmutableSandboxedEnvironment"]

    def environment(**options: Any) -> _FixedTemplate:
        # Code and file contents go to the model as they are, never as HTML.
        options["autoescape"] = False
        return _FixedTemplate(sandbox(**options))

    handler = types.FunctionType(
        upstream.__code__,
        {**upstream.__globals__, "ImmutableSandboxedEnvironment": environment},
        CHAT_FORMAT,
        upstream.__defaults__,
        upstream.__closure__,
    )
    handler.__kwdefaults__ = upstream.__kwdefaults__
    return handler


def _amx_advertised() -> bool:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(
        line.startswith("flags") and "amx_tile" in line.split() for line in cpuinfo.splitlines()
    )


def _log_prompt(model: Any, prompt: str | Sequence[int]) -> None:
    if _PROMPT_LOG is None:
        return
    if isinstance(prompt, str):
        text = prompt
    else:  # token ids, from the handlers of the other chat formats
        text = bytes(model.detokenize(list(prompt), special=True)).decode("utf-8", "replace")
    with open(_PROMPT_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"prompt": text}) + "\n")


_create_completion = llama_cpp.Llama.create_completion


def _completion(self: Any, *args: Any, **kwargs: Any) -> Any:
    if kwargs.get("max_tokens", 0) is None:
        kwargs["max_tokens"] = _CAP
    _log_prompt(self, kwargs["prompt"] if "prompt" in kwargs else args[0])
    return _create_completion(self, *args, **kwargs)


_default_model_params = llama_lib.llama_model_default_params


def _model_params_without_extra_buffers() -> Any:
    params = _default_model_params()
    params.use_extra_bufts = False
    return params


llama_cpp.Llama.create_completion = _completion
chat_formats.register_chat_completion_handler(CHAT_FORMAT)(_chat_handler())
if _amx_advertised():
    llama_lib.llama_model_default_params = _model_params_without_extra_buffers

if __name__ == "__main__":
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
