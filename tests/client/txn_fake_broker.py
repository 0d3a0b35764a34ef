"""A scripted single-node fake broker for the transactional producer's tests.

It speaks just enough of the protocol (ApiVersions, Metadata, FindCoordinator,
InitProducerId, AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn) to let a real client run a transaction, records every request in ``events``
in arrival order, checks what a transaction coordinator and a partition leader would
(a transactional batch for a partition not added to the transaction is a
``violation``), and can be scripted: ``errors[api_key]`` is a list of error codes
answered (one per request) before the normal answer, and ``holds[api_key]`` an
``threading.Event`` a request of that key waits for before it is answered.
It runs on its own event loop thread, so both client faces can use it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
import types
import typing
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.protocol.build import make, response_module
from odradek.protocol.messages import decode_request, encode_response, peek_header
from odradek.records.batch import TRANSACTIONAL_MASK, iter_batches

VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),
    1: (4, 12),  # advertised only: librdkafka writes v2 batches when Fetch v4 is there
    3: (1, 12),
    10: (0, 3),
    18: (0, 3),
    22: (0, 4),
    24: (0, 3),
    25: (0, 3),
    26: (0, 3),
    28: (0, 3),
}
PRODUCER_ID = 4000


def _default(annotation: Any) -> Any:
    text = str(annotation)
    if "None" in text or "Optional" in text:
        return None
    if "tuple" in text:
        return ()
    if "Timedelta" in text or "timedelta" in text:
        return datetime.timedelta(0)
    if "bool" in text:
        return False
    if "str" in text:
        return ""
    if "UUID" in text:
        return None
    return -1


def fill(cls: type, **given: Any) -> Any:
    """``cls`` with ``given`` fields, the others given neutral values."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = _default(hints.get(f.name, f.type))
    if "error_code" in {f.name for f in dataclasses.fields(cls)} and "error_code" not in given:
        values["error_code"] = ErrorCode.none
    return make(cls, **values)


@dataclasses.dataclass
class ProducedBatch:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    count: int


class FakeBroker:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.events: list[tuple[Any, ...]] = []
        self.violations: list[str] = []
        self.errors: dict[int, list[ErrorCode]] = {}
        self.holds: dict[int, threading.Event] = {}
        self.epoch = -1
        self.added: set[tuple[str, int]] = set()  # partitions of the open transaction
        self.offsets_group: str | None = None
        self.log_end: dict[tuple[str, int], int] = {}
        self.produced: list[ProducedBatch] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    def close(self) -> None:
        for event in self.holds.values():
            event.set()
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _stop(self) -> None:
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def names(self) -> list[str]:
        """The transactional request names seen, in order."""
        return [e[0] for e in self.events]

    # -- serving -------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = peek_header(frame)
                body = decode_request(frame, VERSIONS).body
                hold = self.holds.get(api_key)
                if hold is not None:
                    await asyncio.get_running_loop().run_in_executor(None, hold.wait)
                response = self._answer(api_key, version, body)
                payload = encode_response(api_key, version, correlation_id, response)
                writer.write(len(payload).to_bytes(4, "big") + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.tasks.discard(task)

    def _scripted(self, api_key: int) -> ErrorCode:
        queue = self.errors.get(api_key)
        return queue.pop(0) if queue else ErrorCode.none

    def _answer(self, api_key: int, version: int, body: Any) -> Any:
        m = response_module(api_key, version)
        handler = getattr(self, f"_key_{api_key}")
        return handler(m, version, body)

    def _key_18(self, m: types.ModuleType, version: int, body: Any) -> Any:
        keys = tuple(
            fill(m.ApiVersion, api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in VERSIONS.items()
        )
        return fill(m.ApiVersionsResponse, api_keys=keys)

    def _key_3(self, m: types.ModuleType, version: int, body: Any) -> Any:
        broker = fill(
            m.MetadataResponseBroker, node_id=0, host="127.0.0.1", port=self.port, rack=None
        )
        wanted = self.topics if body.topics is None else [t.name for t in body.topics]
        topics = []
        for name in wanted:
            count = self.topics.get(name)
            if count is None:
                topics.append(
                    fill(
                        m.MetadataResponseTopic,
                        name=name,
                        error_code=ErrorCode.unknown_topic_or_partition,
                    )
                )
                continue
            parts = tuple(
                fill(
                    m.MetadataResponsePartition,
                    partition_index=p,
                    leader_id=0,
                    leader_epoch=0,
                    replica_nodes=(0,),
                    isr_nodes=(0,),
                    offline_replicas=(),
                )
                for p in range(count)
            )
            topics.append(
                fill(m.MetadataResponseTopic, name=name, partitions=parts, is_internal=False)
            )
        return fill(
            m.MetadataResponse,
            brokers=(broker,),
            cluster_id="fake",
            controller_id=0,
            topics=tuple(topics),
        )

    def _key_10(self, m: types.ModuleType, version: int, body: Any) -> Any:
        self.events.append(("FindCoordinator", body.key, int(getattr(body, "key_type", 0))))
        code = self._scripted(10)
        return fill(
            m.FindCoordinatorResponse,
            error_code=code,
            node_id=0 if code == ErrorCode.none else -1,
            host="127.0.0.1",
            port=self.port,
        )

    def _key_22(self, m: types.ModuleType, version: int, body: Any) -> Any:
        self.events.append(
            (
                "InitProducerId",
                body.transactional_id,
                int(body.transaction_timeout.total_seconds() * 1000),
                int(getattr(body, "producer_id", -1)),
                int(getattr(body, "producer_epoch", -1)),
            )
        )
        code = self._scripted(22)
        if code != ErrorCode.none:
            return fill(
                m.InitProducerIdResponse, error_code=code, producer_id=-1, producer_epoch=-1
            )
        self.epoch += 1
        self.added.clear()  # a new epoch aborts whatever was open
        self.offsets_group = None
        return fill(m.InitProducerIdResponse, producer_id=PRODUCER_ID, producer_epoch=self.epoch)

    def _key_24(self, m: types.ModuleType, version: int, body: Any) -> Any:
        tps = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        self.events.append(("AddPartitionsToTxn", tps))
        code = self._scripted(24)
        if code == ErrorCode.none and body.v3_and_below_producer_epoch != self.epoch:
            code = ErrorCode.producer_fenced
        if code == ErrorCode.none:
            self.added.update(tps)
        results = []
        for topic in body.v3_and_below_topics:
            results.append(
                fill(
                    m.AddPartitionsToTxnTopicResult,
                    name=topic.name,
                    results_by_partition=tuple(
                        fill(
                            m.AddPartitionsToTxnPartitionResult,
                            partition_index=p,
                            partition_error_code=code,
                        )
                        for p in topic.partitions
                    ),
                )
            )
        return fill(m.AddPartitionsToTxnResponse, results_by_topic_v3_and_below=tuple(results))

    def _key_0(self, m: types.ModuleType, version: int, body: Any) -> Any:
        code = self._scripted(0)
        topics = []
        batches = []
        for topic in body.topic_data:
            parts = []
            for data in topic.partition_data:
                tp = (topic.name, data.index)
                base = self.log_end.get(tp, 0)
                for header in iter_batches(data.records or b""):
                    transactional = bool(header.attributes & TRANSACTIONAL_MASK)
                    batches.append(
                        ProducedBatch(
                            topic.name,
                            data.index,
                            header.producer_id,
                            header.producer_epoch,
                            header.base_sequence,
                            transactional,
                            header.record_count,
                        )
                    )
                    if transactional and tp not in self.added:
                        self.violations.append(f"{tp} produced before AddPartitionsToTxn")
                    if transactional and body.transactional_id is None:
                        self.violations.append("transactional batch without transactional_id")
                    if code == ErrorCode.none:
                        self.produced.append(batches[-1])
                        self.log_end[tp] = self.log_end.get(tp, 0) + header.record_count
                parts.append(
                    fill(
                        m.PartitionProduceResponse,
                        index=data.index,
                        error_code=code,
                        base_offset=base if code == ErrorCode.none else -1,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    )
                )
            topics.append(
                fill(m.TopicProduceResponse, name=topic.name, partition_responses=tuple(parts))
            )
        self.events.append(("Produce", batches))
        return fill(m.ProduceResponse, responses=tuple(topics))

    def _key_25(self, m: types.ModuleType, version: int, body: Any) -> Any:
        self.events.append(("AddOffsetsToTxn", body.group_id))
        code = self._scripted(25)
        if code == ErrorCode.none:
            self.offsets_group = body.group_id
        return fill(m.AddOffsetsToTxnResponse, error_code=code)

    def _key_28(self, m: types.ModuleType, version: int, body: Any) -> Any:
        offsets = {
            (t.name, p.partition_index): int(p.committed_offset)
            for t in body.topics
            for p in t.partitions
        }
        self.events.append(
            (
                "TxnOffsetCommit",
                body.group_id,
                int(getattr(body, "generation_id", -1)),
                getattr(body, "member_id", ""),
                getattr(body, "group_instance_id", None),
                offsets,
            )
        )
        code = self._scripted(28)
        if code == ErrorCode.none and self.offsets_group != body.group_id:
            self.violations.append("TxnOffsetCommit before AddOffsetsToTxn")
        topics = tuple(
            fill(
                m.TxnOffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    fill(
                        m.TxnOffsetCommitResponsePartition,
                        partition_index=p.partition_index,
                        error_code=code,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        )
        return fill(m.TxnOffsetCommitResponse, topics=topics)

    def _key_26(self, m: types.ModuleType, version: int, body: Any) -> Any:
        self.events.append(("EndTxn", bool(body.committed), int(body.producer_epoch)))
        code = self._scripted(26)
        if code == ErrorCode.none:
            if body.producer_epoch != self.epoch:
                code = ErrorCode.producer_fenced
            elif not self.added and self.offsets_group is None:
                code = ErrorCode.invalid_txn_state  # nothing was ever added
        if code == ErrorCode.none:
            self.added.clear()
            self.offsets_group = None
        return fill(m.EndTxnResponse, error_code=code)
