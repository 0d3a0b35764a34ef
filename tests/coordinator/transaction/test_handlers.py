"""The transaction handlers against a real TransactionCoordinator (fake writer and
marker channel): each version's fields, PRODUCER_FENCED for old versions, unknown
topics, the v4+ batched and verify-only form, and every response encodable."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

from odradek.protocol.build import make
from odradek.protocol.messages import Request, RequestHeader
from odradek.server.authorizer import ALLOW_ALL, Authorizer
from odradek.server.handlers import supported_versions
from odradek.server.handlers import transactions as handlers
from tests.coordinator.transaction.test_coordinator import Env

TXN = "app-1"


@dataclass
class Groups:
    def partition_for(self, group_id: str) -> int:
        return 3


@dataclass
class Services:
    txns: Any
    metadata: Any
    groups: Groups
    authorizer: Authorizer = ALLOW_ALL


def request(key: int, version: int, **fields: Any) -> Request:
    module = load_payload_module(key, version, EntityType.request)
    name = {
        24: "AddPartitionsToTxnRequest",
        25: "AddOffsetsToTxnRequest",
        26: "EndTxnRequest",
        65: "DescribeTransactionsRequest",
        66: "ListTransactionsRequest",
    }[key]
    body = make(getattr(module, name), **fields)
    return Request(RequestHeader(key, version, 1, "test"), body, 0)


def topics(key: int, version: int, *names: tuple[str, tuple[int, ...]]) -> tuple[Any, ...]:
    module = load_payload_module(key, version, EntityType.request)
    return tuple(make(module.AddPartitionsToTxnTopic, name=n, partitions=p) for n, p in names)


def encodable(response: Any) -> Any:
    entity_writer(type(response))(io.BytesIO(), response)
    return response


def run(test: Callable[[Env, Services], Awaitable[None]]) -> None:
    async def main() -> None:
        env = Env()
        services = Services(env.coordinator, env.metadata, Groups())
        try:
            await env.lead()
            await test(env, services)
        finally:
            await env.coordinator.stop()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_versions_claimed() -> None:
    versions = supported_versions()
    assert versions[24] == (0, 5)
    assert versions[25] == (0, 4)
    assert versions[26] == (0, 4)
    assert versions[65] == (0, 0)
    assert versions[66] == (0, 2)


def test_client_add_partitions_and_end_txn() -> None:
    async def test(env: Env, services: Services) -> None:
        init = await env.coordinator.init_producer_id(TXN, 60_000)
        pid = init.producer_id
        for version in (0, 3):
            add = request(
                24,
                version,
                v3_and_below_transactional_id=TXN,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=0,
                v3_and_below_topics=topics(24, version, ("t", (0,)), ("nope", (1,))),
            )
            response = encodable(await handlers.add_partitions_to_txn(services, add))
            errors = {
                (t.name, r.partition_index): r.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for r in t.results_by_partition
            }
            assert errors == {
                ("t", 0): ErrorCode.operation_not_attempted,
                ("nope", 1): ErrorCode.unknown_topic_or_partition,
            }
        add = request(
            24,
            3,
            v3_and_below_transactional_id=TXN,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=topics(24, 3, ("t", (0,))),
        )
        response = encodable(await handlers.add_partitions_to_txn(services, add))
        assert (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            == ErrorCode.none
        )
        offsets = request(
            25, 4, transactional_id=TXN, producer_id=pid, producer_epoch=0, group_id="g"
        )
        assert (
            encodable(await handlers.add_offsets_to_txn(services, offsets)).error_code
            == ErrorCode.none
        )
        assert ("__consumer_offsets", 3) in env.coordinator.describe([TXN])[0].partitions
        stale = request(
            26, 1, transactional_id=TXN, producer_id=pid, producer_epoch=5, committed=True
        )
        response = encodable(await handlers.end_txn(services, stale))
        assert response.error_code == ErrorCode.invalid_producer_epoch  # v1: no PRODUCER_FENCED
        stale = request(
            26, 4, transactional_id=TXN, producer_id=pid, producer_epoch=5, committed=True
        )
        assert (await handlers.end_txn(services, stale)).error_code == ErrorCode.producer_fenced
        end = request(
            26, 4, transactional_id=TXN, producer_id=pid, producer_epoch=0, committed=True
        )
        assert encodable(await handlers.end_txn(services, end)).error_code == ErrorCode.none
        await env.settle()
        assert env.describe(TXN).state == "CompleteCommit"

    run(test)


def test_broker_batched_form_and_verify_only() -> None:
    async def test(env: Env, services: Services) -> None:
        pid = (await env.coordinator.init_producer_id(TXN, 60_000)).producer_id
        module = load_payload_module(24, 5, EntityType.request)

        def txn(verify: bool, *names: tuple[str, tuple[int, ...]]) -> Any:
            return make(
                module.AddPartitionsToTxnTransaction,
                transactional_id=TXN,
                producer_id=pid,
                producer_epoch=0,
                verify_only=verify,
                topics=topics(24, 5, *names),
            )

        add = request(24, 5, transactions=(txn(False, ("t", (0,))),))
        response = encodable(await handlers.add_partitions_to_txn(services, add))
        assert response.error_code == ErrorCode.none
        assert (
            response.results_by_transaction[0]
            .topic_results[0]
            .results_by_partition[0]
            .partition_error_code
            == ErrorCode.none
        )
        verify = request(24, 5, transactions=(txn(True, ("t", (0,)), ("u", (0,))),))
        response = encodable(await handlers.add_partitions_to_txn(services, verify))
        errors = {
            (t.name, r.partition_index): r.partition_error_code
            for t in response.results_by_transaction[0].topic_results
            for r in t.results_by_partition
        }
        assert errors == {("t", 0): ErrorCode.none, ("u", 0): ErrorCode.invalid_txn_state}
        assert env.describe(TXN).partitions == (("t", 0),)  # verification adds nothing

    run(test)


def test_describe_and_list() -> None:
    async def test(env: Env, services: Services) -> None:
        pid = (await env.coordinator.init_producer_id(TXN, 60_000)).producer_id
        await env.coordinator.add_partitions(TXN, pid, 0, [("t", 0)])
        describe = request(65, 0, transactional_ids=(TXN, "unknown"))
        states = encodable(
            await handlers.describe_transactions(services, describe)
        ).transaction_states
        assert states[0].error_code == ErrorCode.none and states[0].transaction_state == "Ongoing"
        assert states[0].topics[0].topic == "t" and states[0].topics[0].partitions == (0,)
        assert int(states[0].transaction_start_time.timestamp() * 1000) == env.now[0]
        assert states[1].error_code == ErrorCode.transactional_id_not_found
        for version in (0, 1, 2):
            listing = request(
                66, version, state_filters=("Ongoing", "Nope"), producer_id_filters=()
            )
            response = encodable(await handlers.list_transactions(services, listing))
            assert response.unknown_state_filters == ("Nope",)
            assert [
                (s.transactional_id, s.transaction_state) for s in response.transaction_states
            ] == [(TXN, "Ongoing")]

    run(test)


def test_without_a_coordinator_everything_is_unavailable() -> None:
    async def main() -> None:
        env = Env()
        services = Services(None, env.metadata, Groups())
        add = request(
            24,
            3,
            v3_and_below_transactional_id=TXN,
            v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=topics(24, 3, ("t", (0,))),
        )
        response = encodable(await handlers.add_partitions_to_txn(services, add))
        code = (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        )
        assert code == ErrorCode.coordinator_not_available
        end = request(26, 3, transactional_id=TXN, producer_id=1, producer_epoch=0, committed=False)
        assert (
            await handlers.end_txn(services, end)
        ).error_code == ErrorCode.coordinator_not_available
        describe = request(65, 0, transactional_ids=(TXN,))
        encodable(await handlers.describe_transactions(services, describe))
        listing = request(66, 2, state_filters=(), producer_id_filters=())
        assert (
            encodable(await handlers.list_transactions(services, listing)).transaction_states == ()
        )

    asyncio.run(main())
