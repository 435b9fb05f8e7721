"""The domain layer stays pure: no I/O, no clock, no randomness, no upward imports and no
mutable module state, so that folding a history is the same computation everywhere."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import acode.domain

FORBIDDEN_MODULES = frozenset(
    {
        "os",
        "io",
        "time",
        "datetime",
        "random",
        "sqlite3",
        "subprocess",
        "pathlib",
        "socket",
        "urllib",
        # Importing by name at run time would get round every rule above.
        "importlib",
    }
)
# Dependencies point downwards only: below the domain there is nothing but the errors.
ALLOWED_ACODE = ("acode.domain", "acode.errors")
KNOWN = {"chain", "config", "continuation", "events", "idempotency", "ids", "plan", "reducer"}
CONSTANT_NAME = re.compile(r"_?[A-Z][A-Z0-9_]*")
MUTABLE_NODES = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MUTABLE_FACTORIES = frozenset(
    {"list", "dict", "set", "bytearray", "defaultdict", "deque", "OrderedDict", "Counter"}
)
EFFECTFUL_BUILTINS = frozenset({"__import__", "open", "input", "exec", "eval", "print"})


def domain_modules() -> list[ModuleType]:
    names = [
        info.name
        for info in pkgutil.walk_packages(acode.domain.__path__, prefix="acode.domain.")
        if not info.ispkg
    ]
    return [importlib.import_module(name) for name in ["acode.domain", *sorted(names)]]


MODULES = domain_modules()


def source_of(module: ModuleType) -> str:
    return inspect.getsource(module)


def package_of(module: ModuleType) -> str:
    if hasattr(module, "__path__"):
        return module.__name__
    return module.__name__.rpartition(".")[0]


def imported_names(source: str, package: str) -> list[str]:
    """Every module or module member named by an import anywhere in ``source``, with
    relative imports resolved against ``package``."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def is_forbidden(name: str) -> bool:
    top = name.partition(".")[0]
    if top == "acode":
        return not any(name == ok or name.startswith(f"{ok}.") for ok in ALLOWED_ACODE)
    return top in FORBIDDEN_MODULES


def is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, MUTABLE_NODES):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in MUTABLE_FACTORIES
    return False


def module_level_mutables(source: str) -> list[str]:
    """Names bound at module level to a list, dict or set, other than UPPER_CASE
    constants and ``__all__``."""
    found: list[str] = []
    for node in ast.parse(source).body:
        targets: list[ast.expr]
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if not is_mutable(value):
            continue
        for target in targets:
            found.extend(
                f"{n.id} (line {node.lineno})"
                for n in ast.walk(target)
                if isinstance(n, ast.Name)
                and n.id != "__all__"
                and not CONSTANT_NAME.fullmatch(n.id)
            )
    return found


def test_every_domain_module_is_scanned() -> None:
    scanned = {m.__name__.rpartition(".")[2] for m in MODULES}
    assert scanned >= KNOWN


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_domain_module_imports_nothing_that_reaches_the_world(module: ModuleType) -> None:
    names = imported_names(source_of(module), package_of(module))
    bad = [name for name in names if is_forbidden(name)]
    assert bad == [], f"{module.__name__} imports {bad}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_domain_module_calls_no_builtin_with_effects(module: ModuleType) -> None:
    calls = [
        node.lineno
        for node in ast.walk(ast.parse(source_of(module)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in EFFECTFUL_BUILTINS
    ]
    assert calls == [], f"{module.__name__} calls a builtin with effects on lines {calls}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_domain_module_keeps_no_mutable_globals(module: ModuleType) -> None:
    source = source_of(module)
    assert module_level_mutables(source) == [], module.__name__
    rebinds = [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Global)]
    assert rebinds == [], f"{module.__name__} rebinds globals on lines {rebinds}"


@pytest.mark.parametrize("module", MODULES[1:], ids=lambda m: m.__name__)
def test_a_domain_module_declares_its_public_names(module: ModuleType) -> None:
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{module.__name__} has no __all__"
    assert all(hasattr(module, name) for name in exported)


# -- the scanner itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("import os.path", True),
        ("from datetime import datetime", True),
        ("import urllib.request", True),
        ("from acode.engine.session import Session", True),
        ("from acode import store", True),
        ("from ..security import signing", True),
        ("from . import reducer", False),
        ("from acode.errors import PlanError", False),
        ("import hashlib", False),
        ("import osmosis", False),
        ("import acode", True),
        ("from acode import engine", True),
        ("from acode.work.engine import Engine", True),
        ("def f():\n    import time", True),
    ],
)
def test_the_import_check_catches_what_it_should(source: str, bad: bool) -> None:
    names = imported_names(source, "acode.domain")
    assert any(is_forbidden(n) for n in names) is bad


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("cache = {}", True),
        ("seen: list[str] = []", True),
        ("pending = set()", True),
        ("_registry = dict(a=1)", True),
        ("_TABLE = {1: 2}", False),
        ("KINDS = [1, 2]", False),
        ("__all__ = ['x']", False),
        ("limit = 3", False),
        ("names = frozenset({1})", False),
    ],
)
def test_the_global_check_catches_what_it_should(source: str, flagged: bool) -> None:
    assert bool(module_level_mutables(source)) is flagged
