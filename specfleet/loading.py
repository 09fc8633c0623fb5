"""The one way the controller reads a file a user or a run handed it: a policy, facts, a unit's
record, a store manifest. Each file is bounded before it is parsed (its size, YAML's alias
expansion, its nesting) and checked against its shape after, so a corrupt, binary, huge or
hostile file is one ``FileProblem`` naming the file and what is wrong, never a traceback, a
MemoryError or minutes of parsing.

Bounds: a policy is a few hundred bytes and a unit's record a few hundred KiB; the limits sit
far above what this program writes and far below what would hurt the controller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64  # this program's own files nest about 10 deep
MAX_NODES = 200_000  # values in a YAML file once its aliases are expanded
SMALL_FILE = 1 << 20  # a policy, a facts file
RECORD_FILE = 64 << 20  # a unit's record, a store's manifest

# The keys of a map -> their types; a key whose types include NoneType may also be absent.
Shape = Mapping[str, type | tuple[type, ...]]


class FileProblem(ValueError):
    """A file that cannot be read as what it should be: ``str()`` is one line, the path first."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = str(path), problem


def read_text(path: Path, limit: int = SMALL_FILE) -> str:
    """The file's text, refused when larger than ``limit`` bytes or not UTF-8."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise FileProblem(path, f"cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise FileProblem(path, f"larger than {limit >> 10} KiB; not a file this program writes or reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileProblem(path, "not UTF-8 text (a binary file?)") from None


def load_json(path: Path, *, limit: int = RECORD_FILE, top: type | tuple[type, ...] = dict,
              shape: Shape | None = None) -> Any:
    """A JSON file's value, bounded and checked (``shape_problem``)."""
    text = read_text(path, limit)
    try:
        data = json.loads(text)
    except RecursionError:
        raise FileProblem(path, f"nested more than {MAX_DEPTH} deep") from None
    except ValueError as exc:
        raise FileProblem(path, f"not JSON ({exc})") from None
    return _checked(path, data, top, shape)


def load_yaml(path: Path, *, limit: int = SMALL_FILE, top: type | tuple[type, ...] = dict,
              shape: Shape | None = None) -> Any:
    """A YAML file's value (an empty file is None), bounded and checked (``shape_problem``)."""
    text = read_text(path, limit)
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_NODES:
            raise FileProblem(path, f"more than {MAX_NODES} values once its aliases (*name) are expanded")
        data = loader.construct_document(node)
    except _TooDeep:
        raise FileProblem(path, f"nested more than {MAX_DEPTH} deep") from None
    except yaml.YAMLError as exc:
        raise FileProblem(path, "not YAML (" + " ".join(str(exc).split()) + ")") from None
    finally:
        loader.dispose()
    return _checked(path, data, top, shape)


def shape_problem(data: Any, top: type | tuple[type, ...] = dict, shape: Shape | None = None) -> str | None:
    """Why ``data`` is not of type ``top`` nested at most MAX_DEPTH deep with ``shape``'s keys
    of their types, else None."""
    deepest = _depth(data)
    if deepest > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} deep"
    if not isinstance(data, top) or isinstance(data, bool) and bool not in _types(top):
        return f"not {_kind(top)}: {_kind(type(data))}"
    for key, wanted in (shape or {}).items():
        if key not in data:
            if type(None) in _types(wanted):
                continue
            return f"no {key!r}"
        if not isinstance(data[key], wanted) or isinstance(data[key], bool) and bool not in _types(wanted):
            return f"{key!r} is not {_kind(wanted)}: {_kind(type(data[key]))}"
    return None


def _checked(path: Path, data: Any, top: type | tuple[type, ...], shape: Shape | None) -> Any:
    problem = shape_problem(data, top, shape)
    if problem:
        raise FileProblem(path, problem)
    return data


def _types(wanted: type | tuple[type, ...]) -> tuple[type, ...]:
    return wanted if isinstance(wanted, tuple) else (wanted,)


_KINDS = {dict: "a map", list: "a list", str: "a string", int: "an integer", float: "a number", bool: "true or false",
          type(None): "null"}


def _kind(wanted: type | tuple[type, ...]) -> str:
    return " or ".join(_KINDS.get(kind, kind.__name__) for kind in _types(wanted))


def _depth(data: Any) -> int:
    """How deep ``data`` nests (a scalar: 0), without recursion; stops counting past MAX_DEPTH."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((item, level + 1) for item in (value.values() if isinstance(value, dict) else value))
    return deepest


class _TooDeep(Exception):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses nesting beyond MAX_DEPTH while it composes (its composer
    recurses: a file nested 100,000 deep would exhaust Python's stack first)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._level += 1
        try:
            if self._level > MAX_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._level -= 1


def _expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` holds once every alias is expanded (an alias is the node it
    names, shared, so a 'billion laughs' file is small until something walks it); counted
    once per node, without recursion. A node that contains itself counts as too many."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(MAX_NODES + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if id(node) in open_nodes:
            return MAX_NODES + 1  # a recursive alias: endless once expanded
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                return MAX_NODES + 1
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
