"""Config changes on the controller: the ``Config`` records that set or delete one
resource's keys, decided from the image.

How this works and why: AlterConfigs and IncrementalAlterConfigs (and the configs a
CreateTopics carries) end as one ``Config`` record per key whose value changes (value
None deletes it), so the loader applies them one key at a time and a broker's dynamic
configs are whatever the image holds. ``config_change_records`` merges the requested
changes into the resource's current configs — ``changes`` may be a function of them,
called under the controller's lock (APPEND/SUBTRACT), and ``replace`` drops every key
not named (legacy AlterConfigs) — validates the result (a topic's as a LogConfig, a
broker's by the caller's ``validator``) and returns only the records of keys that
differ. Nothing here writes: the controller commits what this returns (controller.py),
as it does elections.py's and reassignment.py's records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import TOPIC_RESOURCE, MetadataImage, MetadataRecord
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LogConfig


def config_record(
    resource_type: str, resource_name: str, name: str, value: str | None
) -> MetadataRecord:
    """One key of one resource set to ``value`` (None: deleted)."""
    return MetadataRecord(
        "Config",
        {
            "resource_type": resource_type,
            "resource_name": resource_name,
            "name": name,
            "value": value,
        },
    )


def config_change_records(
    image: MetadataImage,
    resource_type: str,
    resource_name: str,
    changes: Mapping[str, str | None] | Callable[[Mapping[str, str]], Mapping[str, str | None]],
    *,
    replace: bool = False,
    validator: Callable[[Mapping[str, str]], None] | None = None,
) -> list[MetadataRecord]:
    """The records that set (value) or delete (None) config keys of one resource,
    validated first; ControllerError (UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, or
    the ``validator``'s) when the change cannot be made."""
    if resource_type == TOPIC_RESOURCE and resource_name not in image.topics:
        raise ControllerError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {resource_name!r} not found")
    current = dict(image.configs.get((resource_type, resource_name), {}))
    if callable(changes):
        changes = changes(current)
    merged = {} if replace else dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if resource_type == TOPIC_RESOURCE:
        try:
            LogConfig.from_properties(merged)
        except LogConfigError as error:
            raise ControllerError("INVALID_CONFIG", str(error)) from None
    if validator is not None:
        validator(merged)
    return [
        config_record(resource_type, resource_name, key, merged.get(key))
        for key in sorted(set(current) | set(merged))
        if current.get(key) != merged.get(key)
    ]
