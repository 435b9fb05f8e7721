"""Which store a workspace's sessions are in, told without loading the settings' parser:
the commands that only read sessions (`acode session list`) ask it at every start, and
loading acode.engine.config and the YAML parser would cost them tens of milliseconds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from acode.system.user_files import read_user_file
from acode.system.workspace import AGENT_DIR

if TYPE_CHECKING:
    from acode.domain.config import StoreSettings

__all__ = ["configured_store_url", "scoped_store_url", "workspace_identity"]

CONFIG_FILE = Path(AGENT_DIR, "config.yml")  # acode.engine.config.CONFIG_RELATIVE


def configured_store_url(
    workspace: Path, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """The workspace's ``store.url`` (None: its SQLite file)."""
    settings = _configured_store(workspace, environ)
    return None if settings is None else settings.url


def scoped_store_url(workspace: Path, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The URL of the workspace's own sessions in its shared store (None: its SQLite
    file): ``store.url`` narrowed to :func:`workspace_identity`."""
    settings = _configured_store(workspace, environ)
    if settings is None or settings.url is None:
        return None
    from acode.store.base import workspace_url

    return workspace_url(settings.url, workspace_identity(workspace, settings))


def workspace_identity(workspace: Path, settings: StoreSettings) -> str:
    """What a shared store knows the workspace by: ``store.workspace``, the same in
    every clone of the repository, else the workspace's absolute path."""
    return settings.workspace or str(workspace.resolve())


def _configured_store(workspace: Path, environ: Mapping[str, str] | None) -> StoreSettings | None:
    """The workspace's ``store:`` settings (None: its SQLite file, told without parsing
    the file), as
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

    return load_config(workspace, environ=environ).store
