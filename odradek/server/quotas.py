"""Client quota enforcement: produce and fetch byte rates, request time (KIP-13, KIP-55,
KIP-124, KIP-219).

How this works and why: the quotas themselves are metadata (``MetadataImage.
client_quotas``, written by AlterClientQuotas); this manager reads them from the
image it is given on every call, and rebuilds its lookup table when the image's quota
mapping is a different object — so a change applies on every broker as soon as its
image shows it, without a restart or a listener. Per request it resolves the bound
for the request's (user, client-id) in Kafka's order (``security/quotas.py``) and
records into the rate of whoever shares that bound (the *sensor*: all of a user's
clients for a /users/alice quota, each client-id apart for /clients/<default>).

- Produce: the request's size is recorded; past the bound the response carries
  ``throttle_time_ms`` and the connection is muted for that long (KIP-219: answer at
  once, then read nothing more from the client until the time is up).
- Fetch (consumers only; followers have replication quotas): the response's record
  bytes are recorded; past the bound the bytes are taken back and the response goes
  out *empty* with the throttle time, as Kafka does, so a throttled consumer is sent
  nothing it would have to be throttled for again.
- ``request_percentage``: the handler's time on the event loop, as a percentage of
  one second per second (Kafka counts I/O-thread time the same way), for every API
  but a follower's fetch; past the bound the response's ``throttle_time_ms`` (when its
  schema has one) and the mute grow to at least that throttle.

Sensors idle for an hour are dropped (Kafka expires them likewise), so client-ids that
come and go do not grow the table for ever.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, Final

from odradek.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Entity,
    WindowedRate,
    resolve,
)

SENSOR_EXPIRY_MS: Final = 3_600_000
QuotaMap = Mapping[Entity, Mapping[str, float]]


class ClientQuotaManager:
    """The broker's client quotas: ``record_*`` return the throttle time in ms."""

    def __init__(
        self,
        quotas: Callable[[], QuotaMap],
        clock: Callable[[], int],
        *,
        samples: int = 11,
        window_ms: int = 1000,
    ) -> None:
        self._quotas = quotas
        self._clock = clock
        self.samples = samples
        self.window_ms = window_ms
        self._seen: QuotaMap | None = None
        self._keys: frozenset[str] = frozenset()
        # (quota key, sensor key) -> (rate, last used ms)
        self._sensors: dict[tuple[str, tuple[str, str]], tuple[WindowedRate, int]] = {}
        self._last_sweep = 0

    def _current(self) -> QuotaMap:
        quotas = self._quotas()
        if quotas is not self._seen:
            self._seen = quotas
            self._keys = frozenset(k for values in quotas.values() for k in values)
        return quotas

    def enabled(self, key: str) -> bool:
        """Whether any entity sets ``key`` (nothing to measure otherwise)."""
        self._current()
        return key in self._keys

    def _sensor(self, key: str, user: str, client_id: str) -> tuple[WindowedRate, float] | None:
        quotas = self._current()
        if key not in self._keys:
            return None
        found = resolve(quotas, user, client_id, key)
        if found is None:
            return None
        now = self._clock()
        name = (key, found.sensor_key)
        entry = self._sensors.get(name)
        rate = entry[0] if entry is not None else WindowedRate(self.samples, self.window_ms)
        self._sensors[name] = (rate, now)
        self._sweep(now)
        return rate, found.bound

    def bound(self, key: str, user: str, client_id: str) -> float | None:
        """The quota ``key`` binds (user, client_id) by, None when unbound."""
        quotas = self._current()
        if key not in self._keys:
            return None
        found = resolve(quotas, user, client_id, key)
        return found.bound if found is not None else None

    def fetch_max_bytes(self, user: str, client_id: str, asked: int) -> int:
        """KAFKA-9677: a consumer's fetch is capped at its quota times the windows
        measured, or a response larger than the quota allows could never be sent
        (a throttled fetch is answered empty, then asked again at the same size)."""
        bound = self.bound(CONSUMER_BYTE_RATE, user, client_id)
        if bound is None:
            return asked
        allowed = int(bound * max(self.samples - 1, 1) * self.window_ms / 1000)
        return max(1, min(asked, allowed))

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record ``value`` against the quota ``key`` binds (user, client_id) by; the
        throttle time in ms (0: within the quota, or no quota)."""
        sensor = self._sensor(key, user, client_id)
        if sensor is None:
            return 0
        rate, bound = sensor
        now = self._clock()
        rate.record(value, now)
        return rate.throttle_ms(bound, now)

    def throttle_now(self, key: str, user: str, client_id: str) -> int:
        """The throttle (user, client_id) is under for ``key`` now, recording nothing."""
        sensor = self._sensor(key, user, client_id)
        if sensor is None:
            return 0
        rate, bound = sensor
        return rate.throttle_ms(bound, self._clock())

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back a ``record`` whose work was not done (a fetch answered empty)."""
        sensor = self._sensor(key, user, client_id)
        if sensor is not None:
            sensor[0].unrecord(value, self._clock())

    def record_produce(self, user: str, client_id: str, size: int) -> int:
        return self.record(PRODUCER_BYTE_RATE, user, client_id, size)

    def record_fetch(self, user: str, client_id: str, size: int) -> int:
        return self.record(CONSUMER_BYTE_RATE, user, client_id, size)

    def record_request_time(self, user: str, client_id: str, seconds: float) -> int:
        return self.record(REQUEST_PERCENTAGE, user, client_id, seconds * 100)

    def _sweep(self, now: int) -> None:
        if now - self._last_sweep < SENSOR_EXPIRY_MS:
            return
        self._last_sweep = now
        stale = [n for n, (_, used) in self._sensors.items() if now - used > SENSOR_EXPIRY_MS]
        for name in stale:
            del self._sensors[name]


class TimedCall:
    """Awaits a coroutine and adds up the time spent *running* it (its steps), not
    the time it spends suspended: ``request_percentage`` charges a client for the
    event loop's time, and a fetch parked in a long poll uses none."""

    __slots__ = ("_coro", "seconds")

    def __init__(self, coro: Awaitable[Any]) -> None:
        assert isinstance(coro, Coroutine), "a handler is an async function"
        self._coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter()
            try:
                if error is not None:
                    yielded = coro.throw(error)
                else:
                    yielded = coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                self.seconds += time.perf_counter() - start
            value, error = None, None
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as thrown:  # CancelledError included: passed on
                error = thrown


__all__ = ["ClientQuotaManager", "TimedCall"]
