"""Read a plan file: YAML with the line of every node, validated by the pure plan model.

PyYAML's ``safe_load`` forgets where things came from and silently keeps the last of two
equal keys. So the file is composed into a node tree first: the tree gives the line of every
key and list item (for messages such as ``plan.yml:12: ...``) and shows duplicate keys,
which are refused; only then is the plain data constructed, from that same tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.reader import ReaderError

from acode.domain.plan import Plan
from acode.domain.plan_validation import PlanProblem, build_plan, plan_error
from acode.errors import PlanError
from acode.system.user_files import USER_FILE_LIMIT, UnfitFile, read_user_file

__all__ = ["load_plan"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml, bundled with PyYAML's wheels, is the safe loader to prefer: besides being faster
# it follows the YAML spec in allowing '?' inside a flow value (`{approve: Apply this?}`),
# which the pure-Python scanner refuses (yaml/pyyaml#128).
_Loader = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


def load_plan(path: Path) -> Plan:
    """Load and validate the plan file at ``path``.

    Raises PlanError naming the file, and the line wherever one is known, for a missing or
    unreadable file, invalid YAML, duplicate keys, and every problem of the plan itself.
    """
    source = str(path)
    data, lines = _parse(_read(path), source)
    return build_plan(data, source=source, line_of=lines.get)


def _read(path: Path) -> str:
    try:
        raw = read_user_file(path)
    except FileNotFoundError as exc:
        raise PlanError(
            f"plan file not found: {path}",
            hint="Check the path; a relative path starts from the current directory.",
        ) from exc
    except UnfitFile as exc:
        raise PlanError(
            f"{path} is not a plan file: {exc.strerror}",
            hint=f"Give the path of a .yml file of at most {USER_FILE_LIMIT // 1024} KiB "
            "(docs/plans.md).",
        ) from exc
    except OSError as exc:
        raise PlanError(
            f"cannot read plan file {path}: {exc.strerror}",
            hint="Check that the file exists and that you may read it.",
        ) from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise plan_error(
            str(path), [PlanProblem(line=line, message=f"not UTF-8 text (byte {exc.start + 1})")]
        ) from exc


def _parse(text: str, source: str) -> tuple[object, dict[tuple[object, ...], int]]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        index = _Index(loader)
        index.visit(root, ())
        if index.problems:
            raise plan_error(source, index.problems)
        data: object = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise plan_error(source, [_marked_problem(exc)]) from exc
    except RecursionError as exc:  # libyaml stops at 1,000 levels; Python's walk sooner
        problem = "lists or mappings nested too deeply (a plan needs four levels)"
        raise plan_error(source, [PlanProblem(line=None, message=problem)]) from exc
    except ReaderError as exc:
        # Positions count bytes in libyaml and characters in PyYAML; the character does not.
        at = text.find(chr(exc.character))
        line = text.count("\n", 0, at) + 1 if at >= 0 else None
        problem = f"invalid YAML: the character U+{exc.character:04X} is not allowed in YAML"
        raise plan_error(source, [PlanProblem(line=line, message=problem)]) from exc
    finally:
        loader.dispose()
    return data, index.lines


def _marked_problem(exc: yaml.MarkedYAMLError) -> PlanProblem:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "cannot be parsed"
    # PyYAML splits its messages in two: "while scanning a quoted scalar" (context, where it
    # started) and "found unexpected end of stream" (problem, where it failed).
    if exc.problem and exc.context and exc.context_mark:
        problem += f" ({exc.context} on line {exc.context_mark.line + 1})"
    if mark is None:
        return PlanProblem(line=None, message=f"invalid YAML: {problem}")
    return PlanProblem(
        line=mark.line + 1, message=f"invalid YAML at column {mark.column + 1}: {problem}"
    )


@dataclass
class _Index:
    """One walk over the node tree: the line of every key and item, and duplicate keys."""

    loader: yaml.SafeLoader | yaml.CSafeLoader
    lines: dict[tuple[object, ...], int] = field(default_factory=dict)
    problems: list[PlanProblem] = field(default_factory=list)
    # Aliases make the tree a graph; visiting each node once keeps a "billion laughs"
    # file as cheap as its size.
    seen: set[int] = field(default_factory=set)

    def visit(self, node: yaml.Node, path: tuple[object, ...]) -> None:
        if id(node) in self.seen:
            # An alias: PyYAML keeps no position for it, and the anchor's line would
            # mislead, so the path falls back to the line of its parent.
            return
        self.seen.add(id(node))
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            self._mapping(node, path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.visit(item, (*path, i))
        elif isinstance(node, yaml.ScalarNode):
            self._scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: tuple[object, ...]) -> None:
        first_line: dict[object, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                # `<<: *base`: the constructor merges it into this mapping.
                self.visit(value_node, path)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                # A list or mapping as a key: the constructor refuses it, with its line.
                self.visit(key_node, path)
                self.visit(value_node, path)
                continue
            key = self._scalar(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                self.problems.append(
                    PlanProblem(
                        line=line,
                        message=f"duplicate key {key!r}; it is already on line {first_line[key]} "
                        "(YAML would silently keep only the last one)",
                    )
                )
            first_line.setdefault(key, line)
            self.lines.setdefault((*path, key), line)
            self.visit(value_node, (*path, key))

    def _scalar(self, node: yaml.ScalarNode) -> object:
        # Constructing here (the loader caches it for construct_document) puts a line on
        # values PyYAML resolves but cannot build, such as the date 2024-13-45.
        try:
            return self.loader.construct_object(node)
        except ValueError as exc:
            self.problems.append(
                PlanProblem(
                    line=node.start_mark.line + 1,
                    message=f"cannot read {node.value!r}: {exc}; put it in quotes if it is text",
                )
            )
            return node.value
