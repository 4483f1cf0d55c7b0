"""Small validation helpers for versioned YAML documents.

Each helper raises the caller's error class with ``<file>: <key.path>: <what is wrong>`` so that
every document error names the file, the key path, the value and what was expected.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias
import yaml

from ._document import Node
from .errors import FibrilError


class Where:
    """A position in a document: file plus key path, used to word errors.

    The key path is composed only when it is read (an error, a duplicate's report): a request
    of recorded inputs or inline samples makes tens of thousands of positions that no error
    ever names, and composing their paths was a third of its parse time. Immutable."""

    __slots__ = ("file", "error", "_parent", "_name", "_path")

    file: str
    error: type[FibrilError]
    _parent: Where | None
    _name: str | int
    _path: str | None

    def __init__(self, file: str, path: str = "", error: type[FibrilError] = FibrilError
                 ) -> None:
        self.file, self.error = file, error
        self._parent, self._name, self._path = None, "", path

    @property
    def path(self) -> str:
        if self._path is None:
            parent = self._parent.path if self._parent is not None else ""
            name = self._name
            if isinstance(name, int):
                self._path = f"{parent}[{name}]"
            else:
                name = _key_name(name)
                self._path = f"{parent}.{name}" if parent else name
        return self._path

    def key(self, name: str | int) -> Where:
        child = Where.__new__(Where)
        child.file, child.error = self.file, self.error
        child._parent, child._name, child._path = self, name, None
        return child

    def fail(self, message: str) -> FibrilError:
        where = f"{self.file}: {self.path}" if self.path else self.file
        return self.error(f"{where}: {message}".replace("\r", " ").replace("\n", " "))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Where) and (self.file, self.path, self.error)
                == (other.file, other.path, other.error))

    def __hash__(self) -> int:
        return hash((self.file, self.path, self.error))

    def __repr__(self) -> str:
        return f"Where(file={self.file!r}, path={self.path!r}, error={self.error.__name__})"


#: Bounds on what one YAML document may cost to read (see ``load_yaml``).
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
MAX_NESTING = 500
MAX_EXPANDED_NODES = 2_000_000
#: The largest integer a document may hold (int64: every count, tick and seed fits).
MAX_INTEGER = 2**63 - 1

# The YAML 1.2 core schema's implicit types (PyYAML's resolver is YAML 1.1's: ``01024`` octal,
# ``12:30:45`` base 60, ``yes``/``on`` booleans, ``2001-12-14`` a date, ``1e-3`` a string).
# Plain scalars matching none of these are strings. As in PyYAML, ``_`` may separate digits
# (``1_000``); ``<<`` merge keys are kept.
_IMPLICIT = re.compile(r"""(?:(?P<null>~|null|Null|NULL|)
                         |(?P<bool>true|True|TRUE|false|False|FALSE)
                         |(?P<int>[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+)
                         |(?P<float>[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)
                                    (?:[eE][-+]?[0-9]+)?
                                    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))
                         |(?P<merge><<))\Z""", re.VERBOSE)
_IMPLICIT_FIRST = frozenset(["", *"~nNtTfF-+0123456789.<"])
_TAGS = {name: f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "merge")}
_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_DEEP_FLOW = re.compile(rf"(?:[\[{{][ \t\r\n]*){{{MAX_NESTING + 1}}}")
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Constructor(yaml.constructor.SafeConstructor):
    """SafeConstructor whose scalar conversions fail as YAML errors at the scalar's position
    (``!!timestamp 2001-13-40`` or a 5,000-digit integer would otherwise raise a bare
    ValueError), whose integers are YAML 1.2's, and which refuses a key given twice in one
    mapping (PyYAML keeps the last one silently)."""

    def __init__(self) -> None:
        yaml.constructor.SafeConstructor.__init__(self)
        self._explicit_pairs: dict[int, list[tuple[yaml.Node, yaml.Node]]] = {}

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # PyYAML deletes the merge pairs from this list in place and then rebinds node.value
        # to merged + explicit pairs: the list kept here ends up holding the explicit pairs.
        self._explicit_pairs.setdefault(id(node), node.value)
        super().flatten_mapping(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False
                          ) -> dict[Hashable, Node]:
        mapping = super().construct_mapping(node, deep=deep)
        explicit = self._explicit_pairs.pop(id(node), node.value)
        # Fast path: nothing merged and as many keys as pairs. Otherwise look closer (keys
        # are constructed already, so this reads them back from the constructor's memo).
        if explicit is not node.value or len(mapping) != len(explicit):
            self._refuse_duplicates(explicit)
        return mapping

    def _refuse_duplicates(self, pairs: list[tuple[yaml.Node, yaml.Node]]) -> None:
        first: dict[object, yaml.Node] = {}
        for key_node, _ in pairs:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeConstructor has refused it already
                continue
            if earlier is not key_node:
                one, two = earlier.start_mark, key_node.start_mark
                where = (f"line {one.line + 1}, again at line {two.line + 1}"
                         if one.line != two.line else
                         f"line {one.line + 1} column {one.column + 1}, again at column "
                         f"{two.column + 1}")
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {short(key)} (first at {where})", two)


def _construct_int(self: _Constructor, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (``01024`` is 1024), ``0o`` octal, ``0x`` hexadecimal."""
    text = self.construct_scalar(node).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    text = text[1:] if text.startswith(("-", "+")) else text
    if text.startswith(("0o", "0x")):
        return sign * int(text[2:], 8 if text[1] == "o" else 16)
    return sign * int(text, 10)


_Construct: TypeAlias = Callable[[_Constructor, yaml.ScalarNode], Node]


def _checked(method: _Construct, what: str) -> _Construct:
    def construct(self: _Constructor, node: yaml.ScalarNode) -> Node:
        try:
            return method(self, node)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"invalid {what} {short(node.value)}: {str(exc).split(':')[0]}",
                node.start_mark) from None
    return construct


_SAFE = yaml.constructor.SafeConstructor.yaml_constructors
# What add_constructor does (a copy of the inherited table, then the new entries), written out:
# PyYAML's stubs take constructors of its own loader classes only, and ours is a mixin.
_Constructor.yaml_constructors = {**_SAFE, **{
    f"tag:yaml.org,2002:{tag}": _checked(method, what) for tag, (method, what) in {
        "int": (_construct_int, "integer"), "float": (_SAFE["tag:yaml.org,2002:float"], "number"),
        "timestamp": (_SAFE["tag:yaml.org,2002:timestamp"], "timestamp"),
        "binary": (_SAFE["tag:yaml.org,2002:binary"], "binary value")}.items()}}


class _TooDeep(Exception):
    pass


class _Resolver(yaml.resolver.BaseResolver):
    """The YAML 1.2 core schema resolver (null, bool, int, float; merge keys), one regular
    expression per plain scalar (PyYAML's loop over per-character resolver lists cost more
    than the rest of loading); counts nesting while the composer descends (libyaml or not),
    so a deep document stops at ``MAX_NESTING`` before anything recurses."""

    _depth = 0

    def resolve(self, kind: type[yaml.Node], value: str, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode:
            return _SEQ_TAG if kind is yaml.SequenceNode else _MAP_TAG
        if implicit[0] and value[:1] in _IMPLICIT_FIRST:
            match = _IMPLICIT.match(value)
            if match is not None and match.lastgroup is not None:  # (every branch is named)
                return _TAGS[match.lastgroup]
        return _STR_TAG

    def descend_resolver(self, current_node: yaml.Node | None, current_index: object) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING:
            raise _TooDeep

    def ascend_resolver(self) -> None:
        self._depth -= 1


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
               yaml.composer.Composer, _Constructor, _Resolver):
    """The pure-Python pipeline (used when PyYAML has no libyaml)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser  # (only there when PyYAML is built with libyaml)

    class _CLoader(CParser, _Constructor, _Resolver):
        """libyaml's parser and composer (about 4x faster), same constructor and resolver."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Constructor.__init__(self)
            _Resolver.__init__(self)
    _Loader: type = _CLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _Loader = _PyLoader


def _key_name(name: str) -> str:
    """A key as it appears in a key path: one line, at most 60 characters."""
    if len(name) <= 60 and name.isprintable():
        return name
    name = short(name[:200])[1:-1] if not name.isprintable() else name
    return name if len(name) <= 60 else name[:57] + "..."


def load_yaml(path: Path, error: type[FibrilError]) -> Node:
    """Read a YAML (or JSON) document; a missing, unreadable, non-UTF-8, oversized or
    unparsable file is a one-line error naming the file."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # e.g. an embedded NUL in a path a document gave
        raise error(f"{short(str(path))}: not a usable file name") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise error(f"{path}: larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB; not read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}: not valid UTF-8 at byte {exc.start} (line {line}): "
                    f"{exc.reason}") from None
    return load_yaml_text(text, str(path), error)


def load_yaml_text(text: str, source: str, error: type[FibrilError], *,
                   loader: type | None = None) -> Node:
    """Parse one YAML document with the YAML 1.2 core schema (``1e-3`` is a float, ``01024``
    the integer 1024, ``yes``, ``12:30:45`` and ``2001-12-14`` strings, ``"1e-3"`` a string),
    a key given twice in one mapping refused, bounded: at most ``MAX_NESTING`` levels,
    ``MAX_EXPANDED_NODES`` nodes with aliases expanded (a "billion laughs" is refused before
    anything walks it), no recursive aliases. Every error is one line ``<source>: ...`` with
    the line and column."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise error(f"{source}: larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB; not read")
    loader = loader or _Loader
    if loader is _PyLoader and _DEEP_FLOW.search(text):
        # The pure-Python scanner is quadratic in flow nesting: refuse before it starts.
        raise error(f"{source}: not accepted as YAML: nested deeper than {MAX_NESTING} levels")
    parser = None
    try:
        parser = loader(text)
        node = parser.get_single_node()
        if node is None:
            return None
        # Aliases need an anchor ('&') and a '*': only then can the node graph share or repeat
        # nodes, so only then is it walked for its expanded size and for cycles.
        problem = _check_nodes(node) if "&" in text and "*" in text else None
        if problem is not None:
            message, mark = problem
            raise error(f"{source}: not accepted as YAML{_at(mark)}: {message}")
        return parser.construct_document(node)
    except yaml.YAMLError as exc:
        raise error(f"{source}: not valid YAML{_position(exc, text)}: {_problem(exc)}") from None
    except (_TooDeep, RecursionError):
        raise error(f"{source}: not accepted as YAML: nested deeper than {MAX_NESTING} "
                    f"levels") from None
    finally:
        if parser is not None:
            parser.dispose()


def _check_nodes(root: yaml.Node) -> tuple[str, yaml.Mark] | None:
    """Depth, expanded size and alias cycles of a composed node graph, without recursion
    (aliases share nodes, so sizes are memoized per node)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, level, done = stack.pop()
        key = id(node)
        if done:
            open_ids.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > MAX_EXPANDED_NODES:
                return (f"more than {MAX_EXPANDED_NODES:,} nodes once aliases are expanded "
                        f"(an alias bomb?)", node.start_mark)
            continue
        if level + depth.get(key, 1) - 1 > MAX_NESTING:
            return f"nested deeper than {MAX_NESTING} levels", node.start_mark
        if key in size:
            continue
        if key in open_ids:
            return "a recursive alias (a node that contains itself)", node.start_mark
        open_ids.add(key)
        stack.append((node, level, True))
        for child in _children(node):
            stack.append((child, level + 1, False))
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        items: list[yaml.Node] = node.value
        return items
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _at(mark: yaml.Mark | None) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _position(exc: yaml.YAMLError, text: str) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return _at(mark)
    position = getattr(exc, "position", None)  # a ReaderError: a character offset
    if isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        return f" (line {line}, column {column})"
    return ""


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}" \
            if isinstance(exc.character, int) else str(exc.reason)
    else:
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        if context and getattr(exc, "problem", None):
            problem = f"{context}: {problem}"
    return _one_line(problem)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_json_text(text: str, where: Where) -> Node:
    """JSON text held in a document (``payload_json``): invalid or too deeply nested JSON is an
    error at ``where``, never a JSONDecodeError or RecursionError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise where.fail(f"not valid JSON: {exc.msg} (line {exc.lineno}, column "
                         f"{exc.colno})") from None
    except RecursionError:
        raise where.fail("not accepted as JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise where.fail(f"not accepted as JSON: {str(exc).split(':')[0]}") from None


# The checked containers' values are still ``Any`` (not ``Node``) for the calibration
# package's readers, which index them without narrowing in two places
# (request/source_states.py, request/episode_specs.py); this package's readers check them.
def mapping(value: Node, where: Where) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.fail(f"expected a mapping, got {describe(value)}")
    return value


def sequence(value: Node, where: Where) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise where.fail(f"expected a list, got {describe(value)}")
    return value


def keys(value: Mapping[str, Node], where: Where, *, required: Sequence[str] = (),
         optional: Sequence[str] = ()) -> None:
    """Reject unknown keys and report missing required ones."""
    allowed = set(required) | set(optional)
    for key in value:
        if key not in allowed:
            name: object = key  # (a YAML key need not be a string)
            raise where.key(name if isinstance(name, str) else short(name)).fail(
                f"unknown key; expected one of: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in value:
            raise where.key(key).fail("missing required key")


def existing_file(base: Path, value: Node, where: Where, what: str = "file") -> Path:
    """A file name relative to ``base`` that names an existing file (never an OSError or a
    ValueError for a name too long or holding a NUL)."""
    path = base / string(value, where)
    try:
        found = "\0" not in str(path) and path.is_file()
    except (OSError, ValueError):
        found = False
    if not found:
        name = str(path)
        shown = repr(name) if len(name) <= 300 else short(name)
        raise where.fail(f"{what} {shown} does not exist")
    return path


def string(value: Node, where: Where) -> str:
    if not isinstance(value, str) or not value:
        raise where.fail(f"expected a non-empty string, got {describe(value)}")
    return value


def number(value: Node, where: Where, *, minimum: float | None = None,
           maximum: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.fail(f"expected a number, got {describe(value)}")
    try:
        result = float(value)
    except OverflowError:  # an integer beyond the float range
        result = math.inf
    if not math.isfinite(result):
        raise where.fail(f"expected a finite number, got {short(value)}")
    if positive and result <= 0:
        raise where.fail(f"expected a number > 0, got {short(value)}")
    if minimum is not None and result < minimum:
        raise where.fail(f"expected a number >= {minimum:g}, got {short(value)}")
    if maximum is not None and result > maximum:
        raise where.fail(f"expected a number <= {maximum:g}, got {short(value)}")
    return result


def integer(value: Node, where: Where, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(f"expected an integer, got {describe(value)}")
    if minimum is not None and value < minimum:
        raise where.fail(f"expected an integer >= {minimum}, got {short(value)}")
    if maximum is not None and value > maximum:
        raise where.fail(f"expected an integer <= {maximum}, got {short(value)}")
    if abs(value) > MAX_INTEGER:
        raise where.fail(f"expected an integer within +-(2**63 - 1), got {short(value)}")
    return value


def boolean(value: Node, where: Where) -> bool:
    if not isinstance(value, bool):
        raise where.fail(f"expected true or false, got {describe(value)}")
    return value


def version(value: Node, where: Where, *, major: int, minors: Sequence[int]) -> tuple[int, int]:
    """Check ``schema_version: {major, minor}`` against the supported versions."""
    supported = ", ".join(f"{major}.{minor}" for minor in minors)
    item = mapping(value, where)
    keys(item, where, required=("major", "minor"))
    got = (integer(item["major"], where.key("major")), integer(item["minor"], where.key("minor")))
    if got[0] != major or got[1] not in minors:
        raise where.fail(f"unsupported schema version {got[0]}.{got[1]}; expected {supported}")
    return got


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 2, 4, 4, 4
_SHORT.maxset, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 4, 50, 50, 40


def short(value: object) -> str:
    """A bounded repr of ``value`` for messages: the work and the text stay small however large
    (or aliased, or deep) the value is."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = " ".join(_SHORT.repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def describe(value: object) -> str:
    """A short description of a value for error messages."""
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {short(value)}"
