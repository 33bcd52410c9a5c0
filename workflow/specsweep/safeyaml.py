"""Reading a config file as plain, bounded data: a strict YAML loader (no tags, no merge keys, bounded
aliases, nodes, depth and string lengths, no control characters) and the checks that a loaded config is
plain data. config.py builds the study from what this returns.

Every error is a SpecsweepError whose one line names the file and the YAML line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecsweepError
from .jsonio import JsonRefused, loads_strict

#: Bounds on a config as data (checked before the schema, so nothing large is ever echoed, hashed or copied).
MAX_CONFIG_BYTES = 1 << 20  # a config file
MAX_ALIASES = 32  # YAML aliases (*name) in one file
MAX_NODES = 100_000  # values in the config once every alias is expanded
MAX_DEPTH = 16  # nesting of mappings and lists
MAX_STRING = 4096  # characters in one string
#: Control characters (C0, DEL, C1) and the bidirectional overrides that make displayed text lie.
_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_PLAIN_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
YTE_KEY = "__use_yte__"


class _DataError(Exception):
    """A config that is not plain data; the message names the YAML line."""

    def __init__(self, mark: Any, message: str) -> None:
        line = getattr(mark, "line", None)
        super().__init__(f"line {line + 1}: {message}" if line is not None else message)


def _quote(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


class StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that reads a config as plain data, or refuses it: no duplicate keys, only string keys
    (YAML 1.1 reads an unquoted `off`, `no`, `1` or `null` key as a boolean, number or null), only plain
    decimal integers (no 010 octal, 0x1f or 1:30), finite numbers, and at most MAX_ALIASES aliases, MAX_DEPTH
    levels and MAX_NODES values once aliases are expanded (an alias bomb is refused before it is expanded)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _DataError(self.peek_event().start_mark, f"more than {MAX_ALIASES} YAML aliases (*name)")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _DataError(self.peek_event().start_mark, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _node_size(node, {}, set())
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _DataError(key_node.start_mark, "a mapping key must be a name, not a list or mapping")
                if key_node.tag != "tag:yaml.org,2002:str":
                    value = self.construct_object(key_node)
                    kind = (
                        "null"
                        if value is None
                        else "the "
                        + {bool: "boolean", int: "integer", float: "number"}.get(type(value), type(value).__name__)
                        + f" {value!r}"
                    )
                    raise _DataError(
                        key_node.start_mark,
                        f"key {_quote(key_node.value)} is read as {kind} by YAML 1.1, not as a name; "
                        f"quote it ('{key_node.value[:60]}')",
                    )
                if key_node.value in seen:
                    raise _DataError(
                        key_node.start_mark,
                        f"key {_quote(key_node.value)} appears twice in one mapping "
                        f"(first at line {seen[key_node.value].line + 1})",
                    )
                seen[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> Any:
        if not _PLAIN_INT.fullmatch(node.value):
            raise _DataError(
                node.start_mark,
                f"{_quote(node.value)} is read as the integer {super().construct_yaml_int(node)} by YAML 1.1 "
                "(octal, hex, binary, base 60 or with _); write a plain decimal number, or quote it",
            )
        if len(node.value.lstrip("+-")) > 19:
            raise _DataError(node.start_mark, f"{_quote(node.value)} is too large a number")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Any) -> Any:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _DataError(node.start_mark, f"{_quote(node.value)} is not a finite number")
        if not _PLAIN_FLOAT.fullmatch(node.value):
            raise _DataError(
                node.start_mark,
                f"{_quote(node.value)} is read as the number {value} by YAML 1.1 (base 60 or with _); "
                "write a plain decimal number, or quote it",
            )
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


def _node_size(node: Any, memo: dict[int, int], open_: set[int]) -> int:
    """Values under a composed YAML node with every alias expanded; a bomb or a loop is refused early."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in open_:
        raise _DataError(node.start_mark, "a YAML alias refers to a mapping or list that contains it")
    open_.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            size += _node_size(child, memo, open_)
            if size > MAX_NODES:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _node_size(k, memo, open_) + _node_size(v, memo, open_)
            if size > MAX_NODES:
                break
    open_.discard(key)
    if size > MAX_NODES:
        raise _DataError(node.start_mark, f"more than {MAX_NODES} values once its YAML aliases are expanded")
    memo[key] = size
    return size


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text as plain data with StrictLoader; every refusal is one SpecsweepError line."""
    if len(text) > MAX_CONFIG_BYTES:
        raise SpecsweepError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes; a config is a short file")
    try:
        return yaml.load(text, Loader=StrictLoader)
    except _DataError as exc:
        raise SpecsweepError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise SpecsweepError(f"{source}: not valid YAML{where}" + (f" ({problem})" if problem else "")) from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise SpecsweepError(f"{source}: not valid YAML ({type(exc).__name__}: {exc})") from None


def load_yaml(path: Path | str) -> dict[str, Any]:
    """Read a config file as plain data (StrictLoader); YTE templates (__use_yte__) are refused."""
    path = Path(path)
    source = f"config {path}"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise SpecsweepError(f"{source}: file not found") from None
    except OSError as exc:
        raise SpecsweepError(f"{source}: cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecsweepError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    data = None
    if text.lstrip().startswith("{"):  # JSON first, as Snakemake reads a config file, but strict
        try:
            data = loads_strict(text)
        except JsonRefused as exc:
            raise SpecsweepError(f"{source}: {exc}") from None
        except (ValueError, RecursionError):
            data = None  # not JSON: a YAML flow mapping, read below
    if data is None:
        data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise SpecsweepError(f"{source}: the top level must be a mapping")
    check_data(data, source)
    return data


def check_config_files(paths: Iterable[Path | str]) -> None:
    """Under Snakemake: re-read each config file as plain data, as the CLI reads it (load_yaml).

    Snakemake reads a --configfile itself before any specsweep code runs: as JSON, else as YAML through YTE
    (PyYAML's FullLoader; a file with `__use_yte__: true` at its top level is a template whose Python
    expressions are evaluated, and YTE then drops the key). So under Snakemake a config file is trusted input;
    what this check adds is that such a file, or one with duplicate keys, boolean names or an alias bomb,
    stops the workflow with the same one line as the CLI gives, instead of running with what YTE made of it."""
    for path in paths:
        load_yaml(path)


def check_data(cfg: Any, source: str = "config") -> None:
    """A config as it reaches specsweep (from our loader or from Snakemake's) must be plain, bounded data:
    string keys, no YTE key, finite numbers, no control characters, at most MAX_DEPTH levels, MAX_NODES values
    and MAX_STRING characters a string, no value that contains itself. One line naming the key path."""
    if isinstance(cfg, dict) and YTE_KEY in cfg:
        raise SpecsweepError(
            f"{source}: {YTE_KEY}: a config is plain data, not a YTE template: remove the key (under Snakemake "
            "the template has already been evaluated: a config file is trusted input there)"
        )
    count = [0]

    def walk(value: Any, path: str, depth: int, open_: frozenset[int]) -> None:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise SpecsweepError(f"{source}: more than {MAX_NODES} values (an alias bomb?)")
        where = path or "(top level)"
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                raise SpecsweepError(f"{source}: {where}: a string of {len(value)} characters (at most {MAX_STRING})")
            bad = _BAD_CHARS.search(value)
            if bad:
                raise SpecsweepError(f"{source}: {where}: contains the control character U+{ord(bad.group()):04X}")
            return
        if isinstance(value, bool) or value is None or isinstance(value, int):
            return
        if isinstance(value, float):
            if not math.isfinite(value):
                raise SpecsweepError(f"{source}: {where}: {value} is not a finite number")
            return
        if not isinstance(value, (dict, list)):
            raise SpecsweepError(
                f"{source}: {where}: a value of type {type(value).__name__} (a config holds strings, numbers, "
                "booleans, lists and mappings; quote a date)"
            )
        if id(value) in open_:
            raise SpecsweepError(f"{source}: {where}: contains itself (a recursive YAML alias)")
        if depth >= MAX_DEPTH:
            raise SpecsweepError(f"{source}: {where}: nested more than {MAX_DEPTH} levels deep")
        inner = open_ | {id(value)}
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]", depth + 1, inner)
            return
        for key, item in value.items():
            if not isinstance(key, str):
                hint = (
                    " (YAML 1.1 reads an unquoted off/no/false as False, on/yes/true as True)"
                    if isinstance(key, bool)
                    else ""
                )
                raise SpecsweepError(
                    f"{source}: {where}: key {key!r} is a {type(key).__name__}, not a name; quote it{hint}"
                )
            shown = key if len(key) <= 60 else key[:60] + "..."
            if len(key) > MAX_STRING or _BAD_CHARS.search(key):
                raise SpecsweepError(f"{source}: {where}: key {shown!r} is too long or holds a control character")
            walk(item, f"{path}.{shown}" if path else shown, depth + 1, inner)

    walk(cfg, "", 0, frozenset())
