"""Sample kio entities for tests of the protocol layer."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)

from odradek.protocol.bounds import uvarint_bytes

PRIMITIVES: dict[str, Any] = {
    "bool": True, "int8": 1, "int16": 1, "int32": 1, "int64": 1, "uint8": 1, "uint16": 1,
    "uint32": 1, "uint64": 1, "float64": 1.0, "uuid": uuid.UUID(int=1),
    "error_code": ErrorCode.none, "string": "s", "bytes": b"b", "records": b"r",
    "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
}  # fmt: skip


def full_entity(entity_type: Any) -> Any:
    """An entity with one element in every array and a value in every nullable field
    (and every tagged field), so that every count and length appears in its encoding."""
    values = {}
    for field in dataclasses.fields(entity_type):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = (full_entity(kind.type_),)
        elif isinstance(kind, EntityField):
            values[field.name] = full_entity(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = (PRIMITIVES[get_schema_field_type(field)],)
        else:
            values[field.name] = PRIMITIVES[get_schema_field_type(field)]
    return entity_type(**values)


uvarint = uvarint_bytes  # the tests' short name for the broker's own encoder
