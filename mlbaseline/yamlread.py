"""Bounded YAML reading: the one place `mlb` parses YAML (config files, profiles, `--set` values).

`yaml.safe_load` refuses arbitrary objects but not hostile sizes: a 500-byte "billion laughs"
document (each anchor a list of nine aliases of the previous one) composes in microseconds as
a graph, then explodes when anything walks it as a tree (a merge, a deep copy, a JSON dump), and
a document nested 500 levels deep overflows the composer's recursion. Libyaml's own loader has
no limits either, so `BoundedLoader` adds them where the graph is built, before any construction:

- nesting depth of the document as written (checked while composing, before the recursion
  could overflow) and as expanded through aliases;
- the number of nodes the document stands for once every alias is expanded, counted per node
  from its children's counts (so an alias costs its anchor's whole size, as a tree walk would);
- duplicate mapping keys, which `safe_load` resolves silently to the last one, so that a
  repeated `throughput:` block drops the first one's settings.

Errors are `YamlLimitError` with the 1-based line; callers add the file name.

It is also the one bounded reader of a whole input file (`read_regular`: a config file here,
`--body-file` in `runners.latency`): a regular file under a size cap, since `/dev/zero` or a
FIFO given as a path would otherwise be read until memory runs out, or wait forever.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mlbaseline.errors import ConfigError

MAX_DEPTH = 100  # far beyond any config; far below Python's recursion limit (3 frames a level)
MAX_NODES = 100_000  # nodes after alias expansion; the default config has about 200
MAX_FILE_BYTES = 4 * 1024 * 1024  # a config file; read no more than this (+1 to detect more)


class YamlLimitError(yaml.YAMLError):
    """A document that is valid YAML but refused: too deep, too large once expanded, or with a
    duplicate key. `line` is 1-based, or None when the document has no position."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


def _line(node: Node) -> int | None:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else None


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with depth, expansion and duplicate-key limits (see the module doc)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        # id(node) -> (expanded node count, expanded depth); the composed tree keeps every
        # node alive while the loader runs, so ids are not reused.
        self._measured: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels", mark.line + 1)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._measure(node)
        return node

    def _measure(self, node: Node) -> None:
        """Record the node's expanded size and depth; an alias returns its anchored node,
        measured already, so its cost is counted again wherever it is used."""
        if id(node) in self._measured:
            return
        sizes = [self._measured.get(id(c), (1, 1)) for c in _children(node)]
        count = 1 + sum(s for s, _ in sizes)
        depth = 1 + max((d for _, d in sizes), default=0)
        if count > MAX_NODES:
            raise YamlLimitError(
                f"expands to more than {MAX_NODES:,} nodes through aliases (an alias bomb?)",
                _line(node),
            )
        if depth > MAX_DEPTH:
            raise YamlLimitError(
                f"nested deeper than {MAX_DEPTH} levels through aliases", _line(node)
            )
        self._measured[id(node)] = (count, depth)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges are meant to be overridden by the keys beside them
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: SafeConstructor reports it with its own message
            if duplicate:
                raise YamlLimitError(f"duplicate key '{key}'", _line(key_node))
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    """Parse one YAML document with the limits above; a SafeLoader subclass, so plain data
    only (the body of PyYAML's own load function, with this loader)."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_mapping(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping (a config file or a profile), or ConfigError
    naming the file (and the line, where the document has one)."""
    try:
        data = load(read_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.__class__.__name__})") from None
    except ValueError as exc:  # not a regular file, or too large
        raise ConfigError(f"{path}: cannot read config file ({exc})") from None
    except YamlLimitError as exc:
        raise ConfigError(f"{path}:{exc.line or 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes. Raises OSError for a file
    that cannot be opened, ValueError for one that is not a regular file or is too large:
    reading `/dev/zero` or a FIFO would never end."""
    return read_regular(path, limit).decode("utf-8")


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see `read_text`). The check is on
    the open descriptor, so a file swapped after the check is still the one measured, and
    the read stops at `limit + 1` bytes whatever the size said."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO would block in open() itself
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes")
    return data


__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "BoundedLoader",
    "YamlLimitError",
    "load",
    "read_mapping",
    "read_regular",
    "read_text",
]
