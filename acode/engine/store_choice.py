"""Which store a workspace's sessions are in, told without loading the settings' parser:
the commands that only read sessions (`acode session list`) ask it at every start, and
loading acode.engine.config and the YAML parser would cost them tens of milliseconds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from acode.system.user_files import read_user_file
from acode.system.workspace import AGENT_DIR

__all__ = ["configured_store_url"]

CONFIG_FILE = Path(AGENT_DIR, "config.yml")  # acode.engine.config.CONFIG_RELATIVE


def configured_store_url(
    workspace: Path, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """The workspace's ``store.url`` (None: its SQLite file), as
    ``acode.engine.config.load_config`` gives it. A store URL is a postgresql:// URL (the
    rule of store.url), so a file none of whose lines says "postgres" outside a comment
    sets none, and is not parsed; a wrong value there is reported by the commands that
    run sessions, which read the whole file."""
    environ = os.environ if environ is None else environ
    if not environ.get("ACODE_STORE_URL"):
        try:
            text = read_user_file(workspace / CONFIG_FILE)
        except FileNotFoundError:
            return None
        except OSError:
            pass  # reported by load_config, as every command reports it
        else:
            if not any(b"postgres" in line.split(b"#", 1)[0] for line in text.splitlines()):
                return None
    from acode.engine.config import load_config

    return load_config(workspace, environ=environ).store.url
