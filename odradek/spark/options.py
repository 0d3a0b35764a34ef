"""Options of the Spark connector: case-insensitive lookup, validation, client configs.

How this works and why: Spark hands a data source its options as strings, and users
moving from Spark's Kafka connector write them in any case (``startingOffsets``,
``startingoffsets``). Every lookup here goes through ``get``, which ignores case, and
every parse error is an ``OptionError`` (a ``ValueError``) whose message starts with
the option's name, so a bad option is one clear line at planning time. Options with
the ``kafka.`` prefix are handed to odradek's client with the prefix stripped; the keys
Spark's Kafka connector refuses (because the connector owns what they control) are
refused here too, each with the option to use instead.

This module has no pyspark or pyarrow import: it is shared by the read and write sides
and by unit tests that run without Spark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, TypeVar

KAFKA_PREFIX: Final = "kafka."
BOOTSTRAP: Final = "kafka.bootstrap.servers"

T = TypeVar("T")


# Set in every Python worker Spark starts (planner, streaming source, task workers).
SPARK_WORKER_ENV: Final = "PYTHON_WORKER_FACTORY_SECRET"
# Read by PySpark's worker when it reports an exception to the JVM: set, it sends only
# the exception's own line ("OptionError: option ...") instead of the traceback.
HIDE_TRACEBACK_ENV: Final = "SPARK_HIDE_TRACEBACK"


class OptionError(ValueError):
    """A bad connector option; the message names it.

    Spark reports a Python data source's exception as its own error whose message is the
    worker's traceback, so a bad option used to read as ``[PYTHON_DATA_SOURCE_ERROR] ...
    Traceback (most recent call last):`` followed by frames of odradek's option parsing.
    Made inside a Spark worker, an OptionError asks that worker to report exceptions
    without the traceback, so the first line of Spark's error ends with the option's
    message. Only that worker is affected: every Spark Python worker exits after
    reporting an exception, and nothing in the connector catches an OptionError.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if SPARK_WORKER_ENV in os.environ:
            os.environ[HIDE_TRACEBACK_ENV] = "1"


# Client keys the connector owns. Value: what to use instead (None: nothing to set).
_REJECTED_FOR_CONSUMER: Final[dict[str, str]] = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as binary; cast or parse the 'key' column",
    "value.deserializer": "values are always read as binary; cast or parse the 'value' column",
    "enable.auto.commit": (
        "the source keeps its offsets in Spark's checkpoint; use the option "
        "'commitOffsetsToGroup' to also commit them to a consumer group"
    ),
    "interceptor.classes": "interceptors would see only binary records; they are not supported",
}
_REJECTED_FOR_PRODUCER: Final[dict[str, str]] = {
    "key.serializer": "keys are always written as binary (cast the 'key' column)",
    "value.serializer": "values are always written as binary (cast the 'value' column)",
    "interceptor.classes": "interceptors are not supported",
    "transactional.id": (
        "the sink owns transactions; deliveryGuarantee=exactly-once derives one id per "
        "query and task"
    ),
}
# Accepted from Spark users but meaningless to a connector that plans its own offsets.
_IGNORED_FOR_CONSUMER: Final = frozenset({"group.id", "group.instance.id"})


def get(options: Mapping[str, str], name: str, default: T | None = None) -> str | T | None:
    """The value of option ``name`` in any case, or ``default``."""
    lowered = name.lower()
    if name in options:
        return options[name]
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return default


def has(options: Mapping[str, str], name: str) -> bool:
    return get(options, name) is not None


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return text == "true"


def get_int(
    options: Mapping[str, str],
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
) -> int | None:
    raw = get(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option '{name}' must be at least {minimum}, got {value}")
    return value


_DURATION_UNITS: Final = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}


def parse_duration_ms(name: str, raw: str) -> int:
    """``"15m"``, ``"30 seconds"``, ``"500ms"`` or a bare number of milliseconds."""
    text = raw.strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz ").strip()
    unit = text[len(number) :].strip() or "ms"
    try:
        value = float(number)
    except ValueError:
        raise OptionError(
            f"option '{name}' must be a duration like '5m' or '30s', got {raw!r}"
        ) from None
    if unit not in _DURATION_UNITS:
        raise OptionError(f"option '{name}' has an unknown time unit {unit!r} in {raw!r}")
    if value < 0:
        raise OptionError(f"option '{name}' must not be negative, got {raw!r}")
    return int(value * _DURATION_UNITS[unit])


def client_config(options: Mapping[str, str], *, for_producer: bool) -> dict[str, str]:
    """The odradek client config for these options: every ``kafka.*`` key, prefix stripped.

    ``kafka.bootstrap.servers`` is required. Keys the connector owns are refused with
    an ``OptionError`` naming the option; the caller's client validates the rest (an
    unknown key fails there, naming the key).
    """
    rejected = _REJECTED_FOR_PRODUCER if for_producer else _REJECTED_FOR_CONSUMER
    config: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith(KAFKA_PREFIX):
            continue
        # Kafka property names are lower case; Spark lower-cases option keys anyway.
        client_key = key[len(KAFKA_PREFIX) :].lower()
        if client_key in rejected:
            reason = rejected[client_key]
            raise OptionError(f"option 'kafka.{client_key}' is not supported: {reason}")
        if not for_producer and client_key in _IGNORED_FOR_CONSUMER:
            continue
        config[client_key] = str(value)
    if not config.get("bootstrap.servers", "").strip():
        role = "producer" if for_producer else "consumer"
        raise OptionError(f"option '{BOOTSTRAP}' must be specified for the Kafka {role}")
    return config
