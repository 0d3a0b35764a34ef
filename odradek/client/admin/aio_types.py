"""Value types of the asyncio admin face, shaped like aiokafka's ``aiokafka.admin``.

How this works and why: aiokafka's admin client takes ``NewTopic``, ``NewPartitions``,
``RecordsToDelete`` and ``ConfigResource`` objects and answers several calls with
protocol responses (``CreateTopicsResponse`` with ``topic_errors`` tuples, ...). These
classes carry the same names, attributes and tuple layouts, so code written against
aiokafka's admin client reads them unchanged: nested entries unpack as tuples, fields
read as attributes, and ``to_object()`` gives the same dicts. They hold no I/O.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from odradek.client._core.aio_errors import IllegalArgumentError
from odradek.client._core.aio_types import OffsetAndMetadata as OffsetAndMetadata


class NewTopic:
    """A topic to create: partitions and replication factor, or an explicit assignment."""

    def __init__(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        replica_assignments: dict[int, list[int]] | None = None,
        topic_configs: dict[str, str] | None = None,
    ) -> None:
        if not ((num_partitions == -1 or replication_factor == -1) ^ (replica_assignments is None)):
            raise IllegalArgumentError(
                "either num_partitions/replication_factor or replica_assignment must be specified"
            )
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = replica_assignments or {}
        self.topic_configs = topic_configs or {}


class NewPartitions:
    """A topic's new total partition count, optionally with the new partitions' replicas."""

    def __init__(self, total_count: int, new_assignments: list[list[int]] | None = None) -> None:
        self.total_count = total_count
        self.new_assignments = new_assignments


class RecordsToDelete:
    """Delete a partition's records before ``before_offset``."""

    def __init__(self, before_offset: int) -> None:
        self.before_offset = before_offset


class ConfigResourceType(enum.IntEnum):
    BROKER = 4
    TOPIC = 2


class ConfigResource:
    """A topic or broker; ``configs`` are the keys to describe or the values to set."""

    def __init__(
        self,
        resource_type: ConfigResourceType | str | int,
        name: str,
        configs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = ConfigResourceType(resource_type)
        self.name = name
        self.configs = configs


# -- responses -----------------------------------------------------------------------
class TopicError(NamedTuple):
    topic: str
    error_code: int
    error_message: str | None


class TopicErrorCode(NamedTuple):
    topic: str
    error_code: int


class ConfigSynonym(NamedTuple):
    config_name: str
    config_value: str | None
    config_source: int


class ConfigEntryTuple(NamedTuple):
    config_names: str
    config_value: str | None
    read_only: bool
    config_source: int
    is_sensitive: bool
    config_synonyms: list[ConfigSynonym]


class DescribedResource(NamedTuple):
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    config_entries: list[ConfigEntryTuple]


class AlteredResource(NamedTuple):
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str


class GroupMember(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


class DescribedGroup(NamedTuple):
    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[GroupMember]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Response:
    """A broker's answer with aiokafka's field names; ``FIELDS`` in wire order."""

    FIELDS: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        assert len(values) == len(self.FIELDS), (type(self).__name__, values)
        for name, value in zip(self.FIELDS, values, strict=True):
            setattr(self, name, value)

    def to_object(self) -> dict[str, Any]:
        return {name: _plain(getattr(self, name)) for name in self.FIELDS}

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS)
        return f"{type(self).__name__}({fields})"


class CreateTopicsResponse(Response):
    FIELDS = ("throttle_time_ms", "topic_errors")
    throttle_time_ms: int
    topic_errors: list[TopicError]


class DeleteTopicsResponse(Response):
    FIELDS = ("throttle_time_ms", "topic_error_codes")
    throttle_time_ms: int
    topic_error_codes: list[TopicErrorCode]


class CreatePartitionsResponse(Response):
    FIELDS = ("throttle_time_ms", "topic_errors")
    throttle_time_ms: int
    topic_errors: list[TopicError]


class DescribeConfigsResponse(Response):
    FIELDS = ("throttle_time_ms", "resources")
    throttle_time_ms: int
    resources: list[DescribedResource]


class AlterConfigsResponse(Response):
    FIELDS = ("throttle_time_ms", "resources")
    throttle_time_ms: int
    resources: list[AlteredResource]


class DescribeGroupsResponse(Response):
    FIELDS = ("throttle_time_ms", "groups")
    throttle_time_ms: int
    groups: list[DescribedGroup]
