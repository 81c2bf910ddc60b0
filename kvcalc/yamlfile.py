"""Reading a spec, config or hardware file safely: bounded size, plain YAML only, every value read as written.

The rules, each with its reason:
- Only a regular file of at most MAX_FILE_BYTES (16 MiB) is read, checked with os.stat before it is opened, so a
  folder, a FIFO, a device or a symlink loop gets a message and never blocks; the text must be UTF-8. A YAML file
  may be at most MAX_YAML_BYTES (64 KiB): PyYAML's Python parser takes up to about 40 us a byte (a flow list of
  numbers, measured on a 2-core machine), so 16 MiB of YAML would take minutes; a spec is a few KiB.
- YAML goes through a SafeLoader: a `!!python/...` or other unknown tag is an error naming the tag (nothing runs).
- A key written twice in one mapping is an error naming it and both lines (a later key must never silently win).
- An integer is plain decimal (`-12`, `0`, `8192`) of at most MAX_DIGITS (40) digits; YAML 1.1's other readings
  (`010` octal, `0x2000`, `0o17`, `1_000`, sexagesimal `1:20`) and longer integers stay strings, which a number
  field then refuses naming the field. Booleans are `true`/`false` only (`yes`, `on` stay strings). Floats are
  decimal, without `_` or `:`.
- Aliases may not expand the document past MAX_NODES values, nor may it nest deeper than MAX_DEPTH (billion
  laughs and deep nesting fail at once, before anything walks the expanded tree).
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import yaml

from kvcalc.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20  # 16 MiB: the largest real config.json is well under 1 MiB
MAX_YAML_BYTES = 64 * 2**10  # 64 KiB of YAML parse in about 2.5 s at worst (256 KiB took 10 s); specs are 1-2 KiB
MAX_NODES = 1_000_000  # values after alias expansion; a bundled spec has a few hundred
MAX_DEPTH = 64  # nesting levels; a spec nests about 6
MAX_DIGITS = 40  # digits of an integer; Python refuses to convert more than 4300, and nothing real has 40


def _too_large(name: str, size: str, limit: int) -> SpecError:
    what = "a YAML spec or hardware file" if limit == MAX_YAML_BYTES else "a spec or config file"
    return SpecError(f"{name}: is {size} bytes; {what} may be at most {_binary(limit)} ({limit} bytes)")


def _binary(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n // 2**10} KiB"


def check_file(path: Path, shown: str | None = None, limit: int = MAX_FILE_BYTES, wanted: str = "a spec or config file") -> int:
    """The size of `path` when it is a readable regular file within `limit` bytes, else a SpecError naming why
    (and naming the file as `shown`, by default the path; `wanted`: the kind of file asked for, said of a folder)."""
    name = shown or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SpecError(f"{name}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SpecError(f"{name}: a symlink loop (the link points back to itself)") from None
        raise SpecError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(f"{name}: is a folder, not {wanted}")
    if not stat.S_ISREG(info.st_mode):
        what = "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
        raise SpecError(f"{name}: is {what}, not a regular file; kvcalc reads only regular files")
    if info.st_size > limit:
        raise _too_large(name, str(info.st_size), limit)
    return info.st_size


def is_file(path: Path, shown: str | None = None) -> bool:
    """Path.is_file(), except that a path the system refuses to look up (a name too long, a folder it may not enter)
    is a SpecError naming it, not an OSError (which would read as a failed write of the output)."""
    try:
        return path.is_file()
    except OSError as exc:
        raise SpecError(f"{shown or path}: cannot read: {exc.strerror or exc}") from None


def _utf16_or_32(data: bytes) -> bool:
    """Whether `data` reads as text in UTF-16 or UTF-32: a byte-order mark, or ASCII text with a NUL beside every
    letter of its first 32 bytes (a binary file's NULs fall elsewhere)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"\0\0\xfe\xff")):
        return True
    head = data[:32]
    if len(head) < 8:
        return False
    even, odd = head[0::2], head[1::2]
    return (not any(odd) and all(0x09 <= b < 0x7f for b in even)) or (not any(even) and all(0x09 <= b < 0x7f for b in odd))


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """A spec or config file's text, or a SpecError naming the file (missing, a folder, a FIFO, too large, binary, ...)."""
    check_file(path, limit=limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew after the check
        raise _too_large(str(path), f"more than {limit}", limit)
    if b"\0" in data and _utf16_or_32(data):
        raise SpecError(f"{path}: cannot read: text in UTF-16 or UTF-32; save it as UTF-8")
    if b"\0" in data:
        raise SpecError(f"{path}: cannot read: a binary file (it has NUL bytes), not a YAML spec or JSON config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: cannot read: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


# ---------------------------------------------------------------- the loader

_INT = re.compile(rf"^[-+]?(?:0|[1-9][0-9]{{0,{MAX_DIGITS - 1}}})$")
_FLOAT = re.compile(r"^(?:[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|[-+]?\.[0-9]+(?:[eE][-+][0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_REPLACED = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}


class _Refused(yaml.constructor.ConstructorError):
    """Well-formed YAML that kvcalc refuses (a duplicate key, an unknown tag): not called malformed."""


def _deep(mark) -> _Refused:
    return _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep (a spec nests about 6)", mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader with decimal-only numbers, true/false booleans, refused duplicate keys and unknown tags."""

    yaml_implicit_resolvers = {  # YAML 1.1's dates are not read either: 2024-01-01 stays a string (YAML 1.2)
        first: [(tag, rx) for tag, rx in resolvers if tag not in _REPLACED | {"tag:yaml.org,2002:timestamp"}]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[object, int] = {}
            merged = 0  # the line of this mapping's merge key '<<', once one is seen
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    line = key_node.start_mark.line + 1
                    if merged:  # which one wins is the loader's order, not what the file says
                        raise _Refused(
                            None, None, f"a second merge key '<<' (line {line}; first at line {merged}): a mapping takes "
                            "one; merge several as '<<: [*a, *b]'", key_node.start_mark)
                    merged = line
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader names it below
                if first is not None:
                    raise _Refused(
                        None, None, f"duplicate key {key!r} (line {line}; first at line {first}): a key may appear "
                        "once in a mapping", key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent, index):
        """A node, refused past MAX_DEPTH levels of nesting (block or flow), before Python's recursion limit."""
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH + 1:  # the root is level 0, as in _expanded_size
                raise _deep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def fetch_flow_collection_start(self, TokenClass):
        """A '[' or '{', refused past MAX_DEPTH open ones: PyYAML's scanner visits every open bracket at each token,
        so 3,000 of them took a second of CPU before the composer's depth was ever reached."""
        if self.flow_level >= MAX_DEPTH:
            raise _deep(self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def construct_undefined(self, node):
        raise _Refused(
            None, None, f"tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed: kvcalc reads plain YAML "
            "(mappings, lists, strings, numbers, true/false) and never runs code from a file", node.start_mark)


class YamlFloat(float):
    """A YAML float that keeps the text it was read from, so a field that takes whole numbers reads the digits as
    written, not the float's nearest value (85899345920.0000000001 is not 85,899,345,920)."""

    text: str

    def __new__(cls, value: float, text: str) -> YamlFloat:
        out = super().__new__(cls, value)
        out.text = text
        return out


def _scalar(pattern: re.Pattern, what: str):
    """A constructor for `!!int`/`!!float`/`!!bool`, explicit or implied, that takes only what `pattern` (YAML 1.2's
    core schema, decimal only) matches: an explicit `!!int 0x10` or `!!bool yes` is refused, not read as 16 or true."""
    base = {"int": yaml.SafeLoader.construct_yaml_int, "float": yaml.SafeLoader.construct_yaml_float,
            "bool": yaml.SafeLoader.construct_yaml_bool}[what]

    def construct(loader, node):
        text = loader.construct_scalar(node)
        if not pattern.match(text) and not (what == "float" and _INT.match(text)):
            rule = {"int": "an integer is written in decimal digits", "float": "a float is written in decimal",
                    "bool": "a boolean is true or false"}[what]
            raise _Refused(None, None, f"!!{what} {text!r}: {rule} (YAML 1.2)", node.start_mark)
        value = base(loader, node)
        if what == "float" and math.isinf(value) and "inf" not in text.lower():
            raise _Refused(None, None, f"{text} is out of the range of a float (it would read as infinity)",
                           node.start_mark)
        return YamlFloat(value, text) if what == "float" else value

    return construct


for _what, _rx in (("int", _INT), ("float", _FLOAT), ("bool", _BOOL)):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_what}", _scalar(_rx, _what))
for _tag in ("timestamp", "binary", "set", "omap", "pairs"):  # YAML 1.1 types a spec never holds: refused by tag
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _Loader.construct_undefined)
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
_Loader.add_constructor(None, _Loader.construct_undefined)


def _expanded_size(root: yaml.Node) -> int:
    """Values in the document once every alias is expanded (shared nodes counted each time), bounded by MAX_NODES."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise SpecError(f"nested more than {MAX_DEPTH} levels deep")
        if sizes.get(id(node)):
            return sizes[id(node)]
        if sizes.get(id(node)) == 0:
            raise SpecError(f"line {node.start_mark.line + 1}: an alias refers to the value that contains it")
        sizes[id(node)] = 0  # in progress: meeting it again below means a recursive alias (&a [*a])
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = total = min(total, MAX_NODES + 1)
        return total

    return size(root, 0)


def _key_at(root: yaml.Node | None, mark) -> str | None:
    """The path of keys (`layer_groups[0].attention.n_heads`) to the value that starts at `mark`, or None."""
    def walk(node: yaml.Node, path: str, depth: int) -> str | None:
        if depth > MAX_DEPTH:
            return None
        if node.start_mark.index == mark.index and path:
            return path
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                found = walk(v, f"{path}.{name}" if path else str(name), depth + 1)
                if found:
                    return found
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                found = walk(v, f"{path}[{i}]", depth + 1)
                if found:
                    return found
        return None

    return walk(root, "", 0) if root is not None else None


def parse_yaml(text: str, origin: str) -> object:
    """Parse YAML text with the rules above, raising SpecError lines that name `origin`."""
    try:
        loader = _Loader(text)  # its reader refuses characters YAML forbids (C0 controls, DEL, U+FFFE, ...)
    except yaml.YAMLError as exc:
        raise SpecError(f"{origin}: malformed YAML: {str(exc).splitlines()[0]}") from None
    node = None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            expanded = _expanded_size(node)
        except SpecError as exc:
            raise SpecError(f"{origin}: {exc}") from None
        if expanded > MAX_NODES:
            raise SpecError(f"{origin}: the document expands to more than {MAX_NODES:,} values (its aliases repeat "
                            "what they name; a spec has a few hundred values), so it is refused")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        key = _key_at(node, mark) if isinstance(exc, _Refused) and mark is not None else None
        where = f"{key}: {where}" if key else where
        problem = getattr(exc, "problem", None) or str(exc)
        kind = "" if isinstance(exc, _Refused) else "malformed YAML: "  # a refused key or tag is well-formed YAML
        raise SpecError(f"{origin}: {kind}{where}{problem}") from None
    except RecursionError:
        raise SpecError(f"{origin}: nested too deeply to read (a spec nests about 6 levels)") from None
    finally:
        loader.dispose()


def line_finder(path: Path) -> Callable[[tuple], int | None]:
    """For a schema error's location in the YAML file at `path` (pydantic's loc: keys, list indices and union tags),
    the line of the last key or list item it names (1-based), read on the first call: an error path only."""
    nodes: list[yaml.Node | None] = []

    def line(loc: tuple) -> int | None:
        if not nodes:
            try:
                loader = _Loader(read_text(path, MAX_YAML_BYTES))
                try:
                    nodes.append(loader.get_single_node())
                finally:
                    loader.dispose()
            except (SpecError, yaml.YAMLError, OSError, RecursionError):
                nodes.append(None)  # changed since it was read: no lines, the messages stand without them
        node, found = nodes[0], None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)]
                if match:  # else a union's tag (gqa, dense) that the file does not write: the same mapping goes on
                    found, node = match[0][0].start_mark.line + 1, match[0][1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                found = node.start_mark.line + 1
        return found

    return line


def load_yaml(path: Path) -> object:
    """Read a YAML file with the rules above, raising SpecError on unreadable, unsafe or malformed input."""
    return parse_yaml(read_text(path, MAX_YAML_BYTES), str(path))
