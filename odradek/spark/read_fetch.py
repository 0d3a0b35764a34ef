"""Executor side: read one offset range of one partition as Arrow record batches.

How this works and why: a Spark task gets a picklable ``RangeSpec`` (bootstrap
servers, client config, topic, partition, [start, end)) and nothing else, so reading
is stateless. ``read_range`` runs a private asyncio loop with odradek's ``Cluster`` and
one ``BrokerConnection`` to the partition's leader (metadata, versions, ListOffsets),
and loops Fetch requests over a blocking ``FetchSocket`` to that broker whose responses
are parsed raw (``protocol.fetch_codec``; the records stay a view of the socket's buffer): each
response is scanned (batch headers only) to find where the next fetch starts, the next
Fetch is sent, and only then the response is decoded into Arrow columns
(``read_arrow``), so the broker prepares the next response while this process decodes.

Offsets may have gaps (compaction, transaction markers, aborted transactions): the
position is always the offset after the last whole batch seen, and reading stops as
soon as the position reaches the end of the range — never waiting for an offset that
does not exist. Records missing from the range are data loss: the range starts below
the log start offset (deleted by retention or DeleteRecords), or the partition now ends
before the range does. With ``fail_on_data_loss`` the task fails with a message naming
topic, partition and offsets; otherwise it logs a warning with the number of offsets
skipped and reads what is there.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Iterator
from typing import Any, Final

import pyarrow as pa
from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import BrokerConnection, KafkaConnectionError, request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, sasl_credentials
from odradek.protocol.fetch_codec import FetchParseError, RawPartition, parse_fetch_response
from odradek.spark.fetch_socket import FetchSocket
from odradek.spark.read_arrow import ArrowDecoder, scan
from odradek.spark.read_spec import DataLossError, RangeSpec, data_loss

logger = logging.getLogger("odradek.spark")
__all__ = ["DataLossError", "RangeSpec", "data_loss", "read_range"]

FETCH: Final = 1
LIST_OFFSETS: Final = 2
READ_VERSIONS: Final = {FETCH: (4, 12), LIST_OFFSETS: (1, 8)}
_RETRY_ERRORS: Final[frozenset[ErrorCode]] = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
    }
)
_RETRY_CODES: Final = frozenset(code.value for code in _RETRY_ERRORS)
MAX_FETCH_BYTES: Final = 256 * 1024 * 1024  # a batch larger than this is not a Kafka batch
# Bytes per fetch unless kafka.max.partition.fetch.bytes is set: a task reads one
# partition range from start to end, so bigger responses only amortise the per-response
# cost (the consumer's 1 MiB default is sized for many partitions per request).
READER_PARTITION_BYTES: Final = 8 * 1024 * 1024


def read_range(spec: RangeSpec) -> Iterator[pa.RecordBatch]:
    """The records of ``spec`` as Arrow batches (one per fetch response with rows)."""
    if spec.start >= spec.end:
        return
    loop = asyncio.new_event_loop()
    reader = _RangeReader(spec)
    try:
        while True:
            batch = loop.run_until_complete(reader.next())
            if batch is None:
                break
            if batch.num_rows:
                yield batch
    finally:
        loop.run_until_complete(reader.close())
        loop.close()


class _RangeReader:
    def __init__(self, spec: RangeSpec) -> None:
        self.spec = spec
        self.config = ClientConfig(dict(spec.client), "consumer")
        self.position = spec.start
        self.decoder = ArrowDecoder(
            spec.topic, spec.partition, spec.include_headers, spec.timestamps
        )
        self.committed = self.config["isolation.level"] == "read_committed"
        self.partition_bytes = int(self.config["max.partition.fetch.bytes"])
        if "max.partition.fetch.bytes" not in spec.client:
            self.partition_bytes = READER_PARTITION_BYTES
        self.cluster: Cluster | None = None
        self.connection: BrokerConnection | None = None
        # Fetches go over a socket of their own, received raw (see fetch_socket).
        self.fetcher: FetchSocket | None = None
        self.fetch_version = 0
        self.inflight_offset = -1  # the offset of the fetch sent and not yet received
        self.deadline_s = self.config["request.timeout.ms"] / 1000 * 4
        self.skipped = 0

    async def _connect(self) -> BrokerConnection:
        if self.connection is not None and not self.connection.closed:
            return self.connection
        if self.cluster is None:
            self.cluster = Cluster(
                self.config["bootstrap.servers"],
                client_id=self.config["client.id"],
                request_timeout_ms=self.config["request.timeout.ms"],
                retry_backoff_ms=self.config["retry.backoff.ms"],
                client_versions=READ_VERSIONS,
                ssl_context=self.config.ssl_context,
                sasl=sasl_credentials(self.config),
            )
        cluster = self.cluster

        async def attempt() -> BrokerConnection:
            await cluster.refresh([self.spec.topic])
            leader = await cluster.leader_for(self.spec.topic, self.spec.partition)
            return await cluster.connection(leader)

        self.connection = await cluster.with_retry(attempt, deadline_s=self.deadline_s)
        return self.connection

    async def _fetcher(self) -> FetchSocket:
        if self.fetcher is not None and not self.fetcher.closed:
            return self.fetcher
        connection = await self._connect()
        self.fetch_version = connection.version_for(FETCH)
        self.inflight_offset = -1
        sasl = sasl_credentials(self.config)
        self.fetcher = FetchSocket(
            connection.address.host,
            connection.address.port,
            client_id=self.config["client.id"],
            timeout_s=self.config["request.timeout.ms"] / 1000,
            ssl_context=self.config.ssl_context,
            sasl=sasl,
            sasl_versions=(
                (
                    connection.version_for(SASL_HANDSHAKE_KEY),
                    connection.version_for(SASL_AUTHENTICATE_KEY),
                )
                if sasl is not None
                else (1, 2)
            ),
        )
        return self.fetcher

    def _fetch_request(self, offset: int) -> Any:
        version = self.fetch_version
        partition = request_entity(
            FETCH,
            version,
            "FetchPartition",
            partition=self.spec.partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=self.partition_bytes,
        )
        return request_entity(
            FETCH,
            version,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=0),
            min_bytes=1,
            max_bytes=max(self.partition_bytes, int(self.config["fetch.max.bytes"])),
            isolation_level=1 if self.committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=(
                request_entity(
                    FETCH, version, "FetchTopic", topic=self.spec.topic, partitions=(partition,)
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )

    def _send(self, fetcher: FetchSocket, offset: int) -> None:
        fetcher.send(self._fetch_request(offset))
        self.inflight_offset = offset

    async def _response(self) -> RawPartition:
        """The partition's data for a fetch at ``self.position`` (retrying leader moves).

        Its ``records`` view is valid until the next call (the fetch socket's buffer).
        """
        deadline = time.monotonic() + self.deadline_s
        backoff = 0.05
        while True:
            try:
                fetcher = await self._fetcher()
                if self.inflight_offset != self.position:
                    if self.inflight_offset >= 0:
                        fetcher.receive()  # the answer to a fetch at another offset
                    self._send(fetcher, self.position)
                frame = fetcher.receive()
                self.inflight_offset = -1
                try:
                    response = parse_fetch_response(frame, self.fetch_version)
                except FetchParseError as error:
                    message = f"odradek: reading {self.spec.name} failed: {error}"
                    raise RuntimeError(message) from None
                if response.error_code != ErrorCode.none.value:
                    name = _error_name(response.error_code)
                    raise RuntimeError(f"odradek: fetching {self.spec.name} failed: {name}")
                ((_name, (data,)),) = response.topics
                if data.error_code in _RETRY_CODES:
                    raise KafkaError(ErrorCode(data.error_code), self.spec.name)
                return data
            except (KafkaError, KafkaConnectionError) as error:
                self.inflight_offset = -1
                if self.fetcher is not None:
                    self.fetcher.close()
                retriable = isinstance(error, KafkaConnectionError) or error.code() in _RETRY_ERRORS
                if not retriable or time.monotonic() + backoff > deadline:
                    message = f"odradek: reading {self.spec.name} failed: {error}"
                    raise RuntimeError(message) from None
                logger.info("odradek: %s: %s; retrying", self.spec.name, error)
                if self.connection is not None:
                    await self.connection.close()
                self.connection = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def next(self) -> pa.RecordBatch | None:
        """The next decoded batch (possibly empty), or None at the end of the range."""
        spec = self.spec
        stalled_since: float | None = None
        while self.position < spec.end:
            data = await self._response()
            if data.error_code == ErrorCode.offset_out_of_range.value:
                if not await self._out_of_range():
                    return None
                continue
            if data.error_code != ErrorCode.none.value:
                name = _error_name(data.error_code)
                raise RuntimeError(f"odradek: fetching {spec.name} failed: {name}")
            records = data.records if data.records is not None else memoryview(b"")
            aborted = None
            if self.committed:
                aborted = data.aborted_transactions or []
            found = scan(records, self.position, aborted, where=spec.name)
            if found.next_offset > self.position:
                start = self.position
                self.position = found.next_offset
                if self.position < spec.end:
                    # Send the next fetch now (one loop turn writes it) and decode meanwhile.
                    self._send(await self._fetcher(), self.position)
                return self.decoder.decode(records, found, start, spec.end)
            # Nothing whole at this position.
            end_of_log = data.last_stable_offset if self.committed else data.high_watermark
            if records and found.whole_batches == 0:
                if self.partition_bytes >= MAX_FETCH_BYTES:
                    raise RuntimeError(f"odradek: {spec.name}: a batch larger than 256 MiB")
                self.partition_bytes *= 2  # one batch larger than the fetch size
                continue
            if records:
                raise RuntimeError(
                    f"odradek: {spec.name}: a fetch at offset {self.position} returned only "
                    "earlier batches"
                )
            if end_of_log <= self.position:
                data_loss(
                    spec,
                    f"offsets {self.position} to {spec.end - 1} were planned but the partition "
                    f"now ends at offset {end_of_log}",
                )
                return None
            # Below the end of the log but nothing returned: retry for a while, not forever.
            now = time.monotonic()
            if stalled_since is None:
                stalled_since = now
            elif now - stalled_since > self.deadline_s:
                raise RuntimeError(
                    f"odradek: {spec.name}: no records at offset {self.position} for "
                    f"{self.deadline_s:.0f} s although the partition ends at {end_of_log}"
                )
            await asyncio.sleep(0.01)
        return None

    async def _out_of_range(self) -> bool:
        """Handle OFFSET_OUT_OF_RANGE at the position; False when the range is done."""
        spec = self.spec
        earliest, latest = await self._log_bounds()
        if self.position < earliest:
            last_lost = min(earliest, spec.end) - 1
            data_loss(
                spec,
                f"offsets {self.position} to {last_lost} were planned but the partition now "
                f"starts at offset {earliest}",
            )
            self.skipped += last_lost - self.position + 1
            self.position = min(earliest, spec.end)
            return self.position < spec.end
        data_loss(
            spec,
            f"offsets {self.position} to {spec.end - 1} were planned but the partition now "
            f"ends at offset {latest}",
        )
        return False

    async def _log_bounds(self) -> tuple[int, int]:
        connection = await self._connect()
        version = connection.version_for(LIST_OFFSETS)
        found: dict[int, int] = {}
        for spec_ts in (-2, -1):
            request = request_entity(
                LIST_OFFSETS,
                version,
                replica_id=-1,
                isolation_level=1 if self.committed else 0,
                topics=(
                    request_entity(
                        LIST_OFFSETS,
                        version,
                        "ListOffsetsTopic",
                        name=self.spec.topic,
                        partitions=(
                            request_entity(
                                LIST_OFFSETS,
                                version,
                                "ListOffsetsPartition",
                                partition_index=self.spec.partition,
                                current_leader_epoch=-1,
                                timestamp=spec_ts,
                            ),
                        ),
                    ),
                ),
            )
            response = await connection.send(request)
            (result,) = response.topics[0].partitions
            if result.error_code != ErrorCode.none:
                raise RuntimeError(
                    f"odradek: listing offsets of {self.spec.name} failed: {result.error_code.name}"
                )
            found[spec_ts] = result.offset
        return found[-2], found[-1]

    async def close(self) -> None:
        if self.fetcher is not None:
            self.fetcher.close()
        if self.cluster is not None:
            await self.cluster.close()


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"
