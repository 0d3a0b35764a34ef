"""RequestTimes: how long each kind of request takes, as a histogram per request name.

How this works and why: Kafka's RequestMetrics keep a TotalTimeMs histogram per request
type, named by the API (``Produce``, ``Metadata``, ...) except Fetch, which it splits into
``FetchConsumer`` and ``FetchFollower``. The dispatcher (dispatcher.py) times each
request from the moment its connection hands it the frame to the moment the response
is built and handed back for the connection to write; a long poll, or a produce
waiting for acks=all, is inside that time, as it is in Kafka's. Kafka's TotalTimeMs
also holds the request's wait in the queue and the response's send; here a frame
read ahead waits on its connection (one request at a time, answered in order) before
the dispatcher sees it, and that wait and the send are not counted.

Each observation is one bisect over fixed bucket bounds and two additions, so the
dispatcher pays well under a microsecond; the buckets are counted apart here and made
cumulative only when the exporter (console/metrics.py) is scraped.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

FETCH_KEY: Final = 1
# Upper bounds in milliseconds (the +Inf bucket is the last count). Fetch long polls
# last up to the client's fetch.max.wait (500 ms by default); a produce that waits for
# acks=all up to its request timeout (30 s by default).
BUCKET_BOUNDS_MS: Final = (
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)


class Histogram:
    """Counts per bucket (not cumulative), their sum and total count."""

    __slots__ = ("buckets", "count", "sum_ms")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKET_BOUNDS_MS) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def cumulative(self) -> list[int]:
        """Prometheus's ``le`` buckets: each counts every observation at or below it."""
        total, out = 0, []
        for value in self.buckets:
            total += value
            out.append(total)
        return out


class RequestTimes:
    def __init__(self) -> None:
        self.by_request: dict[str, Histogram] = {}
        self._names: dict[int, str] = {}  # api key -> Kafka's request name

    def observe(self, name: str, elapsed_ms: float) -> None:
        histogram = self.by_request.get(name)
        if histogram is None:
            histogram = self.by_request[name] = Histogram()
        # bisect_left: a time equal to a bound belongs to that bound's bucket (le).
        histogram.buckets[bisect.bisect_left(BUCKET_BOUNDS_MS, elapsed_ms)] += 1
        histogram.count += 1
        histogram.sum_ms += elapsed_ms

    def request_name(self, api_key: int, body: Any) -> str:
        """Kafka's request name: the API's (its kio entity's name without ``Request``),
        and for Fetch whether a consumer or a follower replica sent it."""
        if api_key == FETCH_KEY:
            state = getattr(body, "replica_state", None)  # v15+: the follower's id is here
            replica_id = state.replica_id if state is not None else body.replica_id
            return "FetchFollower" if replica_id >= 0 else "FetchConsumer"
        name = self._names.get(api_key)
        if name is None:
            name = self._names[api_key] = type(body).__name__.removesuffix("Request")
        return name
