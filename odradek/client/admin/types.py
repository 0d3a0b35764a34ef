"""Value types of the admin client, shaped like confluent-kafka's ``confluent_kafka.admin``.

How this works and why: the admin methods return futures resolving to these plain
objects; they mirror confluent-kafka's names and attributes (``ConfigResource``,
``ConfigEntry``, ``OffsetSpec``, ``ConsumerGroupTopicPartitions``, ...) so code written
for confluent-kafka reads the same. They hold no I/O.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from odradek.client._core.errors import KafkaError
from odradek.client._core.types import TopicPartition


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4  # in an ACL: the cluster (its one resource is named "kafka-cluster")
    TRANSACTIONAL_ID = 5


class ConfigSource(enum.IntEnum):
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, code: int) -> ConfigSource:
        return cls(code) if code in cls._value2member_map_ else cls.UNKNOWN_CONFIG


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AclOperation(enum.IntEnum):
    """Kafka's ACL operation codes (bit positions of an authorized-operations field)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12

    @classmethod
    def from_bits(cls, bits: int) -> list[AclOperation] | None:
        """The operations set in a response's bit field; None when it was not asked for."""
        if bits == -(2**31):  # INT32_MIN: "not requested" in every Kafka response
            return None
        return [op for op in cls if op >= cls.READ and bits & (1 << op)]


class ConsumerGroupType(enum.IntEnum):
    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2

    @classmethod
    def from_name(cls, name: str | None) -> ConsumerGroupType:
        return cls.__members__.get((name or "").upper(), cls.UNKNOWN)


class ConsumerGroupState(enum.IntEnum):
    UNKNOWN = 0
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5

    def __str__(self) -> str:  # an IntEnum prints its number: print the name, as Enum does
        return f"{type(self).__name__}.{self.name}"

    @classmethod
    def from_name(cls, name: str) -> ConsumerGroupState:
        key = name.upper()
        key = {"PREPARINGREBALANCE": "PREPARING_REBALANCING"}.get(key, key)
        key = {"COMPLETINGREBALANCE": "COMPLETING_REBALANCING"}.get(key, key)
        return cls.__members__.get(key, cls.UNKNOWN)


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN_CONFIG
    is_read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    is_synonym: bool = False
    synonyms: dict[str, ConfigEntry] = field(default_factory=dict)
    incremental_operation: AlterConfigOpType | None = None


class ConfigResource:
    """A topic or broker whose configs to describe or alter (hashable by type and name)."""

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str,
        set_config: dict[str, str] | None = None,
        described_configs: object = None,
        error: object = None,
        incremental_configs: list[ConfigEntry] | None = None,
    ) -> None:
        if isinstance(restype, str):
            restype = ResourceType[restype.upper()]
        self.restype = ResourceType(restype)
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])

    def set_config(self, name: str, value: str) -> None:
        self.set_config_dict[name] = value

    def add_incremental_config(self, entry: ConfigEntry) -> None:
        self.incremental_configs.append(entry)

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (
            other.restype,
            other.name,
        )

    def __repr__(self) -> str:
        return f"ConfigResource({self.restype.name}, {self.name!r})"

    def __str__(self) -> str:  # in error messages: "topic orders", "broker 1"
        return f"{self.restype.name.lower()} {self.name}"


@dataclass(frozen=True)
class Node:
    id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def id_string(self) -> str:
        return str(self.id)


@dataclass
class DescribeClusterResult:
    controller: Node | None
    nodes: list[Node]
    cluster_id: str | None = None
    authorized_operations: list[AclOperation] | None = None


@dataclass
class ConsumerGroupListing:
    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState = ConsumerGroupState.UNKNOWN
    type: ConsumerGroupType = ConsumerGroupType.UNKNOWN


@dataclass
class ListConsumerGroupsResult:
    valid: list[ConsumerGroupListing] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


@dataclass
class MemberAssignment:
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: MemberAssignment
    group_instance_id: str | None = None
    target_assignment: MemberAssignment | None = None


@dataclass
class ConsumerGroupDescription:
    group_id: str
    is_simple_consumer_group: bool
    members: list[MemberDescription]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Node | None = None
    authorized_operations: list[AclOperation] | None = None
    type: ConsumerGroupType = ConsumerGroupType.UNKNOWN


@dataclass
class ConsumerGroupTopicPartitions:
    group_id: str
    topic_partitions: list[TopicPartition] | None = None


class OffsetSpec:
    """Which offset ``list_offsets`` looks up: earliest, latest, max_timestamp or a time."""

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3

    def __init__(self, timestamp: int) -> None:
        self._value = int(timestamp)

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(cls.EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(cls.LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(cls.MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        return cls(timestamp_ms)

    @property
    def timestamp(self) -> int:
        return self._value

    def __repr__(self) -> str:
        return f"OffsetSpec({self._value})"


@dataclass
class ListOffsetsResultInfo:
    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass
class DeletedRecords:
    low_watermark: int


# -- topics --------------------------------------------------------------------------
@dataclass
class NewTopic:
    topic: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: list[list[int]] | None = None
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class NewPartitions:
    topic: str
    new_total_count: int
    replica_assignment: list[list[int]] | None = None


class TopicCollection:
    """The topics ``describe_topics`` looks up, by name."""

    def __init__(self, topic_names: list[str]) -> None:
        names = list(topic_names)
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"topic names must be non-empty strings, got {name!r}")
        self.topic_names = names

    def __repr__(self) -> str:
        return f"TopicCollection({self.topic_names!r})"


@dataclass
class TopicPartitionInfo:
    id: int
    leader: Node | None
    replicas: list[Node]
    isr: list[Node]


@dataclass
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[TopicPartitionInfo]
    authorized_operations: list[AclOperation] | None = None


# -- list_topics (cluster metadata, confluent-kafka's ClusterMetadata shape) ---------
@dataclass
class PartitionMetadata:
    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]
    error: KafkaError | None = None


@dataclass
class TopicMetadata:
    topic: str
    partitions: dict[int, PartitionMetadata]
    error: KafkaError | None = None


@dataclass
class BrokerMetadata:
    id: int
    host: str
    port: int


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]
    orig_broker_id: int = -1
    orig_broker_name: str | None = None
