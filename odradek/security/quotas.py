"""Client quotas, the pure part: which quota applies to a (user, client-id), and the
windowed rate that decides how long a client is throttled.

How this works and why (Kafka's docs "Quotas", KIP-13, KIP-55, KIP-124, KIP-219):

- Quotas are stored per *entity*: a user, a client-id or both, each named or the
  default (a None name). A request of user U with client-id C is bound by the first
  entity of this list that has the key (``RESOLUTION_ORDER``, Kafka's precedence):
  /users/U/clients/C, /users/U/clients/<default>, /users/U,
  /users/<default>/clients/C, /users/<default>/clients/<default>, /users/<default>,
  /clients/C, /clients/<default>. No match: unlimited.
- The matched entity also says who *shares* the quota: its components with the
  request's own names put in (``sensor_key``). A quota on /users/alice is one budget
  for every client-id of alice; one on /users/<default> is a budget per user; one on
  /clients/<default> a budget per client-id.
- The rate is Kafka's sampled ``Rate``: ``samples`` windows (``quota.window.num``) of
  ``window_ms`` (``quota.window.size.seconds``); the value is the live windows' sum
  over their span, the span counted as at least ``samples - 1`` whole windows so an
  idle client's first request does not read as an enormous rate. Past its bound the
  client is throttled for ``(rate - bound) / bound * span`` ms — the time after which,
  recording nothing more, the rate is back at the bound — capped at the whole window
  history (``samples * window_ms``).

Nothing here reads a clock: every call takes ``now_ms``, so tests drive time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"
# Which keys an entity of these types may carry (Kafka's ClientQuotaControlManager).
CLIENT_KEYS: Final = frozenset(
    {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE}
)
IP_KEYS: Final = frozenset({CONNECTION_CREATION_RATE})

# An entity as the metadata image keys it: ((type, name or None), ...) sorted by type.
Entity = tuple[tuple[str, str | None], ...]

# Kafka's precedence: "user" and "client" slots, each "name" (the request's own),
# "default" (None) or absent.
_NAME, _DEFAULT = "name", "default"
RESOLUTION_ORDER: Final[tuple[tuple[str | None, str | None], ...]] = (
    (_NAME, _NAME),
    (_NAME, _DEFAULT),
    (_NAME, None),
    (_DEFAULT, _NAME),
    (_DEFAULT, _DEFAULT),
    (_DEFAULT, None),
    (None, _NAME),
    (None, _DEFAULT),
)


def entity(*parts: tuple[str, str | None]) -> Entity:
    """An entity as the image keys it: ``entity((USER, "alice"), (CLIENT_ID, None))`` is
    /users/alice/clients/<default>."""
    return tuple(sorted(parts))


def _candidate(user: str, client_id: str, slots: tuple[str | None, str | None]) -> Entity:
    parts: list[tuple[str, str | None]] = []
    user_slot, client_slot = slots
    if user_slot is not None:
        parts.append((USER, user if user_slot == _NAME else None))
    if client_slot is not None:
        parts.append((CLIENT_ID, client_id if client_slot == _NAME else None))
    return tuple(sorted(parts))


@dataclass(frozen=True, slots=True)
class Resolved:
    """The quota bound for one key, and whose budget it is (``sensor_key``)."""

    bound: float
    entity: Entity
    sensor_key: tuple[str, str]  # (user or "", client-id or ""), Kafka's metric tags


def resolve(
    quotas: Mapping[Entity, Mapping[str, float]], user: str, client_id: str, key: str
) -> Resolved | None:
    """The first entity in Kafka's order that sets ``key`` for (user, client_id)."""
    for slots in RESOLUTION_ORDER:
        candidate = _candidate(user, client_id, slots)
        values = quotas.get(candidate)
        if values is not None and key in values:
            return Resolved(
                values[key],
                candidate,
                (user if slots[0] else "", client_id if slots[1] else ""),
            )
    return None


class WindowedRate:
    """Kafka's sampled rate (module doc): per second, over ``samples`` windows."""

    __slots__ = ("_starts", "_values", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError(f"need at least one window of at least 1 ms: {samples}, {window_ms}")
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._values: list[float] = []

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._starts or now_ms - self._starts[-1] >= self.window_ms:
            self._starts.append(now_ms)
            self._values.append(0.0)
        self._values[-1] += value

    def unrecord(self, value: float, now_ms: int) -> None:
        """Take back the last ``record`` (a fetch answered empty instead)."""
        self._purge(now_ms)
        if self._values:
            self._values[-1] = max(0.0, self._values[-1] - value)

    def span_ms(self, now_ms: int) -> int:
        """The time the rate is measured over: at least ``samples - 1`` windows."""
        self._purge(now_ms)
        elapsed = now_ms - self._starts[0] if self._starts else 0
        return max(elapsed, (self.samples - 1) * self.window_ms, 1)

    def rate(self, now_ms: int) -> float:
        self._purge(now_ms)
        total = sum(self._values)
        return total * 1000 / self.span_ms(now_ms) if total else 0.0

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """How long to hold a client whose rate is past ``bound`` (0 when within it)."""
        if bound <= 0:
            return self.samples * self.window_ms
        rate = self.rate(now_ms)
        if rate <= bound:
            return 0
        wait = (rate - bound) / bound * self.span_ms(now_ms)
        return min(int(wait), self.samples * self.window_ms)

    def _purge(self, now_ms: int) -> None:
        horizon = now_ms - self.samples * self.window_ms
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0]
            del self._values[0]


__all__ = [
    "CLIENT_ID",
    "CLIENT_KEYS",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "ENTITY_TYPES",
    "IP",
    "IP_KEYS",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "RESOLUTION_ORDER",
    "USER",
    "Entity",
    "Resolved",
    "WindowedRate",
    "entity",
    "resolve",
]
