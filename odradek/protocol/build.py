"""Build version-specific kio entities from one set of keyword values.

How this works and why: kio generates a separate dataclass per API version, with
fields appearing and disappearing between versions. Handlers describe a response
once, with every field any version has; ``make`` keeps only the fields the chosen
version's class declares, so one handler serves every version it claims.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


def error_code(name: str) -> ErrorCode:
    """ErrorCode from a Kafka error name such as ``"CORRUPT_MESSAGE"``."""
    return ErrorCode[name.lower()]
