"""Every declared count and length checked against the bytes present, before kio decodes.

How this works and why: kio's native decoder reserves room for an array as soon as it
reads the array's count, before it looks at how many bytes follow. A Metadata v12
request of 85 bytes whose compact topic array claims 2^34 entries made it ask for
128 GiB, and a failed allocation in Rust aborts the process: no Python exception, no
``except`` can save the broker (the lesson of CVE-2022-34917). So no frame reaches kio
until this module has walked it and found that every array count, string and bytes
length and tagged-field size fits in what is left of the frame.

The walk is driven by kio's own entity schemas (the dataclass fields and their
``kafka_type`` metadata, read with kio's introspection helpers), so it knows exactly
the layout kio will read. For each (schema, header) pair it is compiled once into
Python source — one function, nested entities inlined into their parent's loop,
fixed-size runs folded into one addition — and cached. An array of N elements must have at least
N x (the element's smallest encoding, at least one byte) bytes left; a string or
bytes field its whole length; a tagged field its declared size, and a tag kio knows
is walked inside exactly that size. Record sets (``records``) and bytes are skipped
by their length, never read. All arrays together may hold at most
``MAX_ARRAY_ELEMENTS`` elements (each becomes a Python object), and a null array is
refused where the schema allows none (kio would hand the handler a None).

Tagged fields the schema does not know must be ignored (KIP-482: a newer peer may
send new ones on a version we serve), but kio's reader refuses them. The checker
stops at the first with ``UnknownTags``; ``without_unknown_tags`` then walks the frame
again with a second compiled variant that does the same checks and records each
unknown tag's bytes, and returns a copy without them, with each tag count lowered
and the size of every known tag enclosing a removal shrunk to match. Frames without
unknown tags (nearly all) run exactly the code they ran before: the variant only
changes the branch an unknown tag takes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import Any, Final

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

Buffer = bytes | bytearray | memoryview
Checker = Callable[[Buffer, int], int]
Edit = tuple[int, int, bytes]  # replace bytes [start, stop) of a frame with these
Stripper = Callable[[Buffer, int], tuple[int, list[Edit]]]

_FIXED_SIZES: Final = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip
_LENGTH_PREFIXED: Final = ("string", "bytes", "records")
_MAX_VARINT_BYTES: Final = 5  # Kafka's unsigned varints hold an int32
# Array elements and tagged fields in one request or response, all together. Each is a
# turn of a loop here, and each array element becomes a Python object in kio (a topic
# entry ~55 bytes of RSS and ~1 µs): within the default socket.request.max.bytes of
# 100 MiB, a request of 2-byte entries would otherwise take ~3 GB and freeze the event
# loop for most of a minute. A million is far above any real request (a Fetch or
# OffsetCommit names each partition once; CreateTopics takes at most 10,000 partitions).
MAX_ARRAY_ELEMENTS: Final = 1_000_000


class LengthError(ValueError):
    """A declared count or length that the bytes present cannot hold."""


class UnknownTags(Exception):
    """The frame holds a tagged field its schema does not know (a newer peer's field)."""


def _fail(where: str, what: str, pos: int, end: int) -> LengthError:
    return LengthError(f"{where}: {what} at byte {pos}, {max(end - pos, 0)} bytes left")


def read_uvarint(buf: Buffer, pos: int, end: int, where: str) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint that must end before ``end``."""
    value = shift = 0
    start = pos
    while True:
        if pos >= end or pos - start >= _MAX_VARINT_BYTES:
            raise _fail(where, "unterminated or over-long varint", start, end)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _count_error(where: str, count: int, unit: int, pos: int, end: int) -> LengthError:
    if count < 0:
        return _fail(where, f"negative count {count}", pos, end)
    return _fail(where, f"count {count} (at least {count * unit} bytes)", pos, end)


def _length_error(where: str, length: int, pos: int, end: int) -> LengthError:
    if length < 0:
        return _fail(where, f"negative length {length}", pos, end)
    return _fail(where, f"length {length}", pos, end)


def _tag_error(where: str, tag: int, size: int, pos: int, end: int) -> LengthError:
    return _fail(where, f"tagged field {tag} of {size} bytes", pos, end)


def _misfit_error(where: str, tag: int, field_end: int, pos: int) -> LengthError:
    return LengthError(
        f"{where}: tagged field {tag}'s value ends at byte {pos}, its declared size at {field_end}"
    )


def _marker_error(where: str, marker: int, pos: int, end: int) -> LengthError:
    return _fail(where, f"nullable struct marker {marker} (not -1 or 1)", pos, end)


def _elements_error(where: str, pos: int, limit: int) -> LengthError:
    return LengthError(f"{where}: more than {limit} array elements in all, before byte {pos}")


def _null_error(where: str, pos: int) -> LengthError:
    return LengthError(f"{where}: null where the schema allows no null, before byte {pos}")


def _short(where: str, pos: int, end: int) -> LengthError:
    return _fail(where, "fields run past the end", pos, end)


class _Compiler:
    """Python source for one entity type and everything reachable from it.

    Nested entities are inlined into their parent's loop (a function call per array
    element costs more than the checks themselves); one-byte varints, nearly all of
    them, are read inline too."""

    def __init__(self, trace: bool = False, strip: bool = False) -> None:
        self.trace = trace
        self.strip = strip  # record unknown tags for removal instead of stopping at one
        self.min_sizes: dict[Any, int] = {}
        self.constants: dict[str, object] = {}

    def traced(self, width: str) -> list[str]:
        """In trace mode, a line recording where a count or length of ``width`` starts."""
        return [f"_trace.append((pos, {width!r}))"] if self.trace else []

    def constant(self, value: str) -> str:
        name = f"_w{len(self.constants)}"
        self.constants[name] = value
        return name

    def min_size(self, entity: Any) -> int:
        if entity not in self.min_sizes:
            total = 1 if entity.__flexible__ else 0  # the tagged-field count
            for field in fields(entity):
                if get_field_tag(field) is None:
                    total += self.field_min_size(entity, field)
            self.min_sizes[entity] = total
        return self.min_sizes[entity]

    def field_min_size(self, entity: Any, field: Field[Any]) -> int:
        flexible = entity.__flexible__
        kind = classify_field(field)
        if isinstance(kind, (PrimitiveTupleField, EntityTupleField)):
            return 1 if flexible else 4
        if isinstance(kind, EntityField):
            return 1 if is_optional(field) else self.min_size(kind.type_)
        kafka_type = get_schema_field_type(field)
        if kafka_type in _FIXED_SIZES:
            return _FIXED_SIZES[kafka_type]
        if _is_header_client_id(entity, field):
            return 2
        if flexible:
            return 1
        return 2 if kafka_type == "string" else 4

    def fixed_entity_size(self, entity: Any) -> int | None:
        """The size of an entity whose every field has a fixed size, else None."""
        if entity.__flexible__:
            return None
        sizes = [self.fixed_size(field) for field in fields(entity)]
        return None if None in sizes else sum(size or 0 for size in sizes)

    def fixed_size(self, field: Field[Any]) -> int | None:
        if not isinstance(classify_field(field), PrimitiveField):
            return None
        return _FIXED_SIZES.get(get_schema_field_type(field))

    def entity_lines(self, entity: Any, depth: int) -> list[str]:
        """Lines that move ``pos`` past one ``entity``."""
        body: list[str] = []
        pending = 0  # fixed-size bytes not yet added to pos
        tagged: list[tuple[int, Field[Any]]] = []
        for field in fields(entity):
            tag = get_field_tag(field)
            if tag is not None:
                tagged.append((int(tag), field))
                continue
            size = self.fixed_size(field)
            if size is not None:
                pending += size
                continue
            if pending:
                # What follows starts with its own bounds check, which covers these.
                body.append(f"pos += {pending}")
                pending = 0
            body += self.field_code(entity, field, depth, is_tag=False)
        if pending and entity.__flexible__:
            body.append(f"pos += {pending}")  # the tagged section's check covers these
        elif pending:
            body += self.advance(pending, entity.__name__)
        if entity.__flexible__:
            body += self.tagged_code(entity, tagged, depth)
        return body

    def advance(self, size: int, what: str) -> list[str]:
        where = self.constant(what)
        return [f"pos += {size}", f"if pos > end: raise _short({where}, pos - {size}, end)"]

    def field_code(self, entity: Any, field: Field[Any], depth: int, *, is_tag: bool) -> list[str]:
        """Lines that move ``pos`` past one field."""
        where = self.constant(f"{entity.__name__}.{field.name}")
        flexible = entity.__flexible__
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField):
            size = self.fixed_size(field)
            if size is not None:
                return self.advance(size, f"{entity.__name__}.{field.name}")
            legacy_string = _is_header_client_id(entity, field) or not flexible
            return self.length_prefixed(get_schema_field_type(field), legacy_string, where)
        if isinstance(kind, EntityField):
            inner = self.entity_lines(kind.type_, depth + 1)
            if is_tag or not is_optional(field):
                return inner
            return [  # KIP-893 nullable struct: an int8 marker, -1 for null
                f"if pos >= end: raise _short({where}, pos, end)",
                "marker = buf[pos]",
                "pos += 1",
                "if marker == 1:",
                *_indent(inner),
                f"elif marker != 255: raise _marker_error({where}, marker, pos - 1, end)",
            ]
        # kio reads a null array as None even where the schema says it cannot be null,
        # and handlers would then fail on it; Kafka refuses such a request.
        nullable = is_optional(field) and not is_tag
        if isinstance(kind, PrimitiveTupleField):
            element_type = get_schema_field_type(field)
            size = _FIXED_SIZES.get(element_type)
            unit = size if size is not None else (1 if flexible else 2)
            lines = self.array_count(flexible, unit, where, nullable)
            if size is not None:
                return [*lines, f"pos += count * {size}"]
            inner = self.length_prefixed(element_type, not flexible, where)
            return [*lines, "for _ in range(count):", *_indent(inner)]
        assert isinstance(kind, EntityTupleField)
        fixed = self.fixed_entity_size(kind.type_)
        if fixed is not None:  # the count check covers the whole array
            lines = self.array_count(flexible, max(1, fixed), where, nullable)
            return [*lines, f"pos += count * {fixed}"]
        unit = max(1, self.min_size(kind.type_))
        lines = self.array_count(flexible, unit, where, nullable)
        # ``range(count)`` is evaluated once: nested arrays may reuse the name.
        inner = self.entity_lines(kind.type_, depth + 1)
        return [*lines, "for _ in range(count):", *_indent(inner)]

    def uvarint(self, name: str, where: str) -> list[str]:
        """Read an unsigned varint into ``name``; one- and two-byte values (lengths
        below 16 KiB) without a call."""
        return [
            f"if pos >= end: raise _short({where}, pos, end)",
            *self.traced("uvarint"),
            f"{name} = buf[pos]",
            f"if {name} < 128: pos += 1",
            "elif pos + 1 < end and buf[pos + 1] < 128:",
            f"    {name} = ({name} & 127) | (buf[pos + 1] << 7)",
            "    pos += 2",
            f"else: {name}, pos = _uvarint(buf, pos, end, {where})",
        ]

    def array_count(self, flexible: bool, unit: int, where: str, nullable: bool) -> list[str]:
        """Read an array's count into ``count`` (0 for null) and check it fits."""
        null = "count = 0" if nullable else f"raise _null_error({where}, pos)"
        if flexible:
            read = [*self.uvarint("count", where), "if count: count -= 1", f"else: {null}"]
        else:
            read = [
                f"if pos + 4 > end: raise _short({where}, pos, end)",
                *self.traced("int32"),
                "count = _i32(buf, pos)[0]",
                "pos += 4",
                f"if count == -1: {null}",
            ]
        return [
            *read,
            f"if count < 0 or count * {unit} > end - pos:",
            f"    raise _count_error({where}, count, {unit}, pos, end)",
            "elements -= count",
            f"if elements < 0: raise _elements_error({where}, pos, MAX_ARRAY_ELEMENTS)",
        ]

    def length_prefixed(self, kafka_type: str, legacy: bool, where: str) -> list[str]:
        assert kafka_type in _LENGTH_PREFIXED, kafka_type
        if not legacy:
            read = [*self.uvarint("length", where), "if length: length -= 1"]
        else:
            width, unpack = (2, "_i16") if kafka_type == "string" else (4, "_i32")
            read = [
                f"if pos + {width} > end: raise _short({where}, pos, end)",
                *self.traced("int16" if width == 2 else "int32"),
                f"length = {unpack}(buf, pos)[0]",
                f"pos += {width}",
                "if length == -1: length = 0",
            ]
        return [
            *read,
            "if length < 0 or length > end - pos:",
            f"    raise _length_error({where}, length, pos, end)",
            "pos += length",
        ]

    def tagged_code(
        self, entity: Any, tagged: list[tuple[int, Field[Any]]], depth: int
    ) -> list[str]:
        where = self.constant(f"{entity.__name__} tagged fields")
        field_end, outer_end = f"field_end{depth}", f"outer_end{depth}"
        strip = self.strip
        lines = [
            f"if pos >= end: raise _short({where}, pos, end)",
            *self.traced("uvarint"),
            "if buf[pos] == 0:",
            "    pos += 1",
            "else:",
            *([f"    count_start{depth} = pos"] if strip else []),
            f"    tags, pos = _uvarint(buf, pos, end, {where})",
            *(
                [f"    count_end{depth}, tags{depth}, dropped{depth} = pos, tags, 0"]
                if strip
                else []
            ),
            "    if tags * 2 > end - pos:",
            f"        raise _count_error({where}, tags, 2, pos, end)",
            "    elements -= tags  # each one a turn of this loop",
            f"    if elements < 0: raise _elements_error({where}, pos, MAX_ARRAY_ELEMENTS)",
            "    for _ in range(tags):",
            *([f"        tag_start{depth} = pos"] if strip else []),
            f"        tag, pos = _uvarint(buf, pos, end, {where})",
            *_indent(self.traced("uvarint"), 2),
            *([f"        size_start{depth} = pos"] if strip else []),
            f"        size, pos = _uvarint(buf, pos, end, {where})",
            f"        if size > end - pos: raise _tag_error({where}, tag, size, pos, end)",
        ]
        # A tag kio knows is read by kio with the field's own reader: walk it inside
        # exactly its declared size (if the value ended elsewhere, kio and this walk
        # would part ways).
        keyword = "if"
        for tag, field in tagged:
            inner = self.field_code(entity, field, depth, is_tag=True)
            lines += [
                f"        {keyword} tag == {tag}:",
                f"            {field_end} = pos + size",
                *([f"            size_end{depth}, removed{depth} = pos, removed"] if strip else []),
                f"            {outer_end}, end = end, {field_end}",
                *_indent(inner, 3),
                f"            end = {outer_end}",
                f"            if pos != {field_end}:",
                f"                raise _misfit_error({where}, {tag}, {field_end}, pos)",
            ]
            if strip:  # unknown tags removed inside this one: its size shrinks with them
                lines += [
                    f"            if removed != removed{depth}:",
                    f"                new = _uvarint_bytes({field_end} - size_end{depth}"
                    f" - (removed - removed{depth}))",
                    f"                edits.append((size_start{depth}, size_end{depth}, new))",
                    f"                removed += size_end{depth} - size_start{depth} - len(new)",
                ]
            keyword = "elif"
        # KIP-482: a tag this schema does not know (a newer peer's field) is ignored.
        # kio's reader refuses it, so the fast walk stops and hands the frame to the
        # stripping walk, which records its bytes for removal.
        if strip:
            unknown = [
                "pos += size",
                f"edits.append((tag_start{depth}, pos, b''))",
                f"removed += pos - tag_start{depth}",
                f"dropped{depth} += 1",
            ]
        else:
            unknown = ["raise UnknownTags()"]
        if tagged:
            lines += ["        else:", *_indent(unknown, 3)]
        else:
            lines += _indent(unknown, 2)
        if strip:  # the tag count then drops by the tags removed
            lines += [
                f"    if dropped{depth}:",
                f"        new = _uvarint_bytes(tags{depth} - dropped{depth})",
                f"        edits.append((count_start{depth}, count_end{depth}, new))",
                f"        removed += count_end{depth} - count_start{depth} - len(new)",
            ]
        return lines


def _indent(lines: list[str], levels: int = 1) -> list[str]:
    return [" " * (4 * levels) + line for line in lines]


def _is_header_client_id(entity: type, field: Field[Any]) -> bool:
    # Kafka writes RequestHeader.client_id as a legacy nullable string even in the
    # flexible header v2 (kio does the same).
    return entity.__name__ == "RequestHeader" and field.name == "client_id"


@cache
def checker(
    schema: Any, header_schema: Any = None, max_elements: int = MAX_ARRAY_ELEMENTS
) -> Checker:
    """``check(frame, offset) -> end`` for ``header_schema`` then ``schema`` at ``offset``:
    raises LengthError if any declared count or length exceeds the bytes after it, or
    the arrays hold more than ``max_elements`` elements in all, and UnknownTags at the
    first tagged field the schema does not know (``without_unknown_tags`` then makes a
    frame kio can read)."""
    check: Checker = _build(schema, header_schema, None, max_elements, strip=False)
    return check


@cache
def _stripper(schema: Any, header_schema: Any, max_elements: int) -> Stripper:
    strip: Stripper = _build(schema, header_schema, None, max_elements, strip=True)
    return strip


def without_unknown_tags(
    frame: Buffer,
    schema: Any,
    header_schema: Any = None,
    max_elements: int = MAX_ARRAY_ELEMENTS,
    offset: int = 0,
) -> bytes:
    """A copy of ``frame`` with every tagged field the schemas do not know removed (and
    the counts and enclosing tag sizes fixed to match), after the same bounds checks as
    ``checker``. For the rare frame on which ``checker`` raised UnknownTags."""
    _end, edits = _stripper(schema, header_schema, max_elements)(frame, offset)
    view = memoryview(frame)
    parts: list[bytes | memoryview] = []
    position = 0
    for start, stop, replacement in sorted(edits):
        parts += (view[position:start], replacement)
        position = stop
    parts.append(view[position:])
    return b"".join(parts)


def checked(
    frame: Buffer,
    schema: Any,
    header_schema: Any = None,
    max_elements: int = MAX_ARRAY_ELEMENTS,
    offset: int = 0,
) -> Buffer:
    """``frame`` after the bounds checks, or a copy of it without unknown tags."""
    try:
        checker(schema, header_schema, max_elements)(frame, offset)
    except UnknownTags:
        return without_unknown_tags(frame, schema, header_schema, max_elements, offset)
    return frame


def traced_positions(schema: Any, header_schema: Any, frame: Buffer) -> list[tuple[int, str]]:
    """(position, "int16" | "int32" | "uvarint") of every count and length prefix the
    checker reads in a valid ``frame``: for tests that inflate each one in turn."""
    trace: list[tuple[int, str]] = []
    _build(schema, header_schema, trace, MAX_ARRAY_ELEMENTS, strip=False)(frame, 0)
    return trace


def _build(
    schema: Any, header_schema: Any, trace: list[Any] | None, max_elements: int, *, strip: bool
) -> Any:
    compiler = _Compiler(trace=trace is not None, strip=strip)
    source = _source(schema, header_schema, compiler)
    namespace: dict[str, Any] = {
        "_uvarint": read_uvarint,
        "_uvarint_bytes": uvarint_bytes,
        "_i16": struct.Struct(">h").unpack_from,
        "_i32": struct.Struct(">i").unpack_from,
        "_short": _short,
        "_count_error": _count_error,
        "_length_error": _length_error,
        "_tag_error": _tag_error,
        "_misfit_error": _misfit_error,
        "_marker_error": _marker_error,
        "_null_error": _null_error,
        "_elements_error": _elements_error,
        "UnknownTags": UnknownTags,
        "MAX_ARRAY_ELEMENTS": max_elements,
        "_trace": trace,
        **compiler.constants,
    }
    exec(compile(source, f"<bounds {schema.__module__}.{schema.__name__}>", "exec"), namespace)
    return namespace["check"]


def _source(schema: Any, header_schema: Any, compiler: _Compiler) -> str:
    lines = ["def check(buf, pos):", "    end = len(buf)", "    elements = MAX_ARRAY_ELEMENTS"]
    if compiler.strip:  # (start, stop, replacement) byte edits; bytes removed so far
        lines += ["    edits = []", "    removed = 0"]
    if header_schema is not None:
        lines += _indent(compiler.entity_lines(header_schema, 0))
    lines += _indent(compiler.entity_lines(schema, 0))
    lines.append("    return (pos, edits)" if compiler.strip else "    return pos")
    return "\n".join(lines) + "\n"


def source_of(schema: Any, header_schema: Any = None, *, strip: bool = False) -> str:
    """The generated checker's source, for reading and debugging."""
    return _source(schema, header_schema, _Compiler(strip=strip))
