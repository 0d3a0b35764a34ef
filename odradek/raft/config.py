"""Timers and limits of the KRaft consensus core, under Kafka's property names.

How this works and why: every timer the quorum runs comes from one frozen ``RaftConfig``
whose fields carry Kafka's ``controller.quorum.*`` names and defaults, so an operator's
``server.properties`` means the same thing here as on a Kafka controller.
``RaftConfig.from_properties`` reads those names (unknown keys are the caller's business);
the simulation builds configs directly. Randomisation of the timeouts happens in the
node with the injected ``random.Random``; this module is data only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

# Property name → field name. The values are Kafka's names; the defaults below are Kafka's.
PROPERTY_NAMES: dict[str, str] = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.append.linger.ms": "append_linger_ms",
}


class ConfigError(ValueError):
    """A quorum property has a value that cannot be used (operator error)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    # A voter that has no leader starts an election after this (randomised up to 2x).
    election_timeout_ms: int = 1000
    # A follower that hears nothing from its leader for this long starts an election;
    # the leader resigns if a majority has not fetched within it (check-quorum).
    fetch_timeout_ms: int = 2000
    # The ceiling of the exponential backoff between failed elections.
    election_backoff_max_ms: int = 1000
    # The first step of that backoff, and the pause before retrying a failed request.
    retry_backoff_ms: int = 20
    # An unanswered request is given up (and resent) after this.
    request_timeout_ms: int = 2000
    # The leader fsyncs appended entries at most this long after appending them.
    append_linger_ms: int = 25
    # A follower's Fetch max wait: the leader parks a fetch it has nothing new for up to
    # this long (Kafka's raft client: 500 ms). Followers send at most half the fetch and
    # request timeouts, so a parked fetch never looks like a dead leader.
    fetch_max_wait_ms: int = 500
    # Bytes of log entries per Fetch response and of snapshot per FetchSnapshot chunk.
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"{field.name} must be a non-negative integer, got {value!r}")
        if self.election_timeout_ms == 0 or self.fetch_timeout_ms == 0:
            raise ConfigError("election and fetch timeouts must be positive")
        if self.fetch_max_bytes == 0 or self.snapshot_chunk_bytes == 0:
            raise ConfigError("fetch and snapshot chunk sizes must be positive")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RaftConfig:
        """The quorum settings of a Kafka properties mapping; other keys are ignored."""
        values: dict[str, int] = {}
        for name, field_name in PROPERTY_NAMES.items():
            if name not in properties:
                continue
            raw = properties[name].strip()
            try:
                values[field_name] = int(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not an integer") from None
        return cls(**values)
