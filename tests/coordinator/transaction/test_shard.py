"""TransactionShard ops with an injected clock: what each request decides, what it
writes, and that a reload from those records gives the same state."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.coordinator.runtime import CoordinatorError, CoordinatorResult
from odradek.coordinator.transaction.coordinator import TransactionSettings
from odradek.coordinator.transaction.records import decode_value, encode_key
from odradek.coordinator.transaction.shard import NEED_PRODUCER_ID, InitResult, TransactionShard
from odradek.coordinator.transaction.state import TransactionMetadata, TxnState
from odradek.records.codec import Record

S = TxnState
SETTINGS = TransactionSettings(
    abort_check_interval_ms=1_000,
    expiration_check_interval_ms=10_000,
    id_expiration_ms=100_000,
)
TP0, TP1, TP2 = ("t", 0), ("t", 1), ("u", 0)


class Listener:
    """Records what the shard hands over (the facade's ShardListener)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, TxnState, int]] = []
        self.unloads = 0

    def prepared(self, shard: TransactionShard, metadata: TransactionMetadata) -> None:
        self.seen.append((metadata.transactional_id, metadata.state, metadata.producer_epoch))

    def unloaded(self, shard: TransactionShard) -> None:
        self.unloads += 1


class Harness:
    def __init__(self) -> None:
        self.now = [1_000]
        self.listener = Listener()
        self.log: list[tuple[bytes, bytes | None]] = []
        self.shard = self.new_shard()

    def new_shard(self) -> TransactionShard:
        return TransactionShard(0, SETTINGS, lambda: self.now[0], self.listener, 3)

    def run(self, result: CoordinatorResult[Any], fail: str | None = None) -> Any:
        """Append (or fail to) as the runtime would."""
        if fail is not None:
            assert result.rollback is not None
            return result.rollback(CoordinatorError(fail))
        self.log += list(result.records)
        if result.apply is not None:
            result.apply()
        return result.response

    def reload(self) -> TransactionShard:
        shard = self.new_shard()
        for offset, (key, value) in enumerate(self.log):
            shard.replay(Record(offset, 0, key, value))
        shard.on_loaded()
        return shard

    def init(
        self, txn: str = "a", expected: tuple[int, int] | None = None, pid: int | None = 100
    ) -> InitResult:
        return self.run(self.shard.init_producer_id(txn, 60_000, expected, pid))

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], txn: str = "a") -> str:
        return self.run(self.shard.add_partitions(txn, pid, epoch, tps))

    def end(self, pid: int, epoch: int, commit: bool, txn: str = "a") -> str:
        return self.run(self.shard.end_txn(txn, pid, epoch, commit))

    def complete(self, pid: int, epoch: int, commit: bool, txn: str = "a") -> bool:
        return self.run(self.shard.complete(txn, pid, epoch, commit))

    def state(self, txn: str = "a") -> TxnState:
        metadata = self.shard.get(txn)
        assert metadata is not None
        return metadata.state


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.shard.on_loaded()
    return harness


def snapshot(shard: TransactionShard) -> dict[str, tuple[Any, ...]]:
    return {
        i: (
            m.state,
            m.producer_id,
            m.producer_epoch,
            m.timeout_ms,
            sorted(m.partitions),
            m.start_ms,
        )
        for i, m in shard.ids.items()
    }


def test_new_id_gets_the_allocated_producer_id_at_epoch_0(h: Harness) -> None:
    assert h.init(pid=None) == InitResult(NEED_PRODUCER_ID)
    assert h.log == []
    assert h.init() == InitResult("NONE", 100, 0)
    key, value = h.log[-1]
    assert key == encode_key("a")
    assert value is not None and decode_value(value).partitions is None  # Empty
    assert snapshot(h.reload()) == snapshot(h.shard)


def test_init_bumps_the_epoch_and_kip360_expected_epoch(h: Harness) -> None:
    h.init()
    assert h.init(pid=None) == InitResult("NONE", 100, 1)  # a new instance fences
    assert h.init(expected=(100, 1), pid=None) == InitResult("NONE", 100, 2)
    # A retry of that bump (the client never heard the answer): same epoch again.
    assert h.init(expected=(100, 1), pid=None) == InitResult("NONE", 100, 2)
    assert h.init(expected=(100, 0), pid=None) == InitResult("PRODUCER_FENCED")
    assert h.init(expected=(999, 2), pid=None) == InitResult("PRODUCER_FENCED")


def test_invalid_timeout(h: Harness) -> None:
    for timeout in (0, -1, SETTINGS.max_timeout_ms + 1):
        result = h.run(h.shard.init_producer_id("a", timeout, None, 100))
        assert result == InitResult("INVALID_TRANSACTION_TIMEOUT")


def test_epoch_exhaustion_rotates_the_producer_id(h: Harness) -> None:
    h.init()
    metadata = h.shard.get("a")
    assert metadata is not None
    metadata.producer_epoch = 32766
    assert h.init(expected=(100, 32766), pid=None) == InitResult(NEED_PRODUCER_ID)
    assert h.init(expected=(100, 32766), pid=200) == InitResult("NONE", 200, 0)
    assert metadata.last_producer_id == 100
    # The rotation's retry, by the previous producer id at its exhausted epoch.
    assert h.init(expected=(100, 32766), pid=None) == InitResult("NONE", 200, 0)


def test_add_partitions_opens_and_extends_a_transaction(h: Harness) -> None:
    h.init()
    assert h.add(999, 0, TP0) == "INVALID_PRODUCER_ID_MAPPING"
    assert h.add(100, 1, TP0) == "PRODUCER_FENCED"
    assert h.add(100, 0, TP0, txn="nope") == "INVALID_PRODUCER_ID_MAPPING"
    h.now[0] = 2_000
    assert h.add(100, 0, TP0) == "NONE"
    assert h.state() is S.ONGOING and h.shard.ids["a"].start_ms == 2_000
    written = len(h.log)
    assert h.add(100, 0, TP0) == "NONE"
    assert len(h.log) == written  # nothing new: no record
    h.now[0] = 3_000
    assert h.add(100, 0, TP1, TP2) == "NONE"
    assert h.shard.ids["a"].partitions == {TP0, TP1, TP2}
    assert h.shard.ids["a"].start_ms == 2_000
    assert snapshot(h.reload()) == snapshot(h.shard)


def test_verify_partitions(h: Harness) -> None:
    h.init()
    assert h.shard.verify_partitions("a", 100, 0, [TP0]) == {TP0: "INVALID_TXN_STATE"}
    h.add(100, 0, TP0)
    assert h.shard.verify_partitions("a", 100, 0, [TP0, TP1]) == {
        TP0: "NONE",
        TP1: "INVALID_TXN_STATE",
    }
    assert h.shard.verify_partitions("a", 100, 1, [TP0]) == {TP0: "PRODUCER_FENCED"}
    assert h.shard.verify_partitions("a", 5, 0, [TP0]) == {TP0: "INVALID_PRODUCER_ID_MAPPING"}
    h.end(100, 0, True)
    assert h.shard.verify_partitions("a", 100, 0, [TP0]) == {TP0: "CONCURRENT_TRANSACTIONS"}


def test_commit_and_its_retries(h: Harness) -> None:
    h.init()
    assert h.end(100, 0, True) == "INVALID_TXN_STATE"  # nothing open
    h.add(100, 0, TP0, TP1)
    assert h.end(100, 0, True) == "NONE"
    assert h.state() is S.PREPARE_COMMIT
    assert h.listener.seen == [("a", S.PREPARE_COMMIT, 0)]
    assert h.end(100, 0, True) == "CONCURRENT_TRANSACTIONS"
    assert h.end(100, 0, False) == "INVALID_TXN_STATE"
    assert h.add(100, 0, TP2) == "CONCURRENT_TRANSACTIONS"
    assert h.init(pid=None) == InitResult("CONCURRENT_TRANSACTIONS")
    assert h.complete(100, 0, True)
    assert h.state() is S.COMPLETE_COMMIT and not h.shard.ids["a"].partitions
    assert h.end(100, 0, True) == "NONE"
    assert h.end(100, 0, False) == "INVALID_TXN_STATE"
    assert h.complete(100, 0, True)  # nothing left: no record
    assert snapshot(h.reload()) == snapshot(h.shard)
    # The next transaction starts from CompleteCommit.
    assert h.add(100, 0, TP2) == "NONE" and h.state() is S.ONGOING


def test_abort(h: Harness) -> None:
    h.init()
    h.add(100, 0, TP0)
    assert h.end(100, 0, False) == "NONE" and h.state() is S.PREPARE_ABORT
    assert h.end(100, 0, False) == "CONCURRENT_TRANSACTIONS"
    assert h.end(100, 0, True) == "INVALID_TXN_STATE"
    h.complete(100, 0, False)
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(100, 0, False) == "NONE"


def test_init_while_ongoing_fences_and_aborts(h: Harness) -> None:
    h.init()
    h.add(100, 0, TP0)
    assert h.init(pid=None) == InitResult("CONCURRENT_TRANSACTIONS")
    metadata = h.shard.ids["a"]
    assert (metadata.state, metadata.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert h.listener.seen == [("a", S.PREPARE_ABORT, 1)]
    # The fenced instance can do nothing more.
    assert h.end(100, 0, True) == "PRODUCER_FENCED"
    assert h.add(100, 0, TP1) == "PRODUCER_FENCED"
    assert h.init(pid=None) == InitResult("CONCURRENT_TRANSACTIONS")  # until complete
    assert snapshot(h.reload()) == snapshot(h.shard)
    h.complete(100, 1, False)
    assert h.init(pid=None) == InitResult("NONE", 100, 2)


def test_failed_appends_change_nothing(h: Harness) -> None:
    h.init()
    before = snapshot(h.shard)
    result = h.run(h.shard.add_partitions("a", 100, 0, [TP0]), fail="NOT_COORDINATOR")
    assert result == "NOT_COORDINATOR" and snapshot(h.shard) == before
    h.add(100, 0, TP0)
    before = snapshot(h.shard)
    failed = h.run(h.shard.init_producer_id("a", 60_000, None, None), fail="NOT_COORDINATOR")
    assert failed == InitResult("NOT_COORDINATOR")
    assert snapshot(h.shard) == before and h.shard.ids["a"].pending is None
    assert h.run(h.shard.end_txn("a", 100, 0, True), fail="COORDINATOR_NOT_AVAILABLE") == (
        "COORDINATOR_NOT_AVAILABLE"
    )
    assert snapshot(h.shard) == before and h.listener.seen == []
    failed_new = h.run(h.shard.init_producer_id("b", 60_000, None, 7), fail="NOT_COORDINATOR")
    assert failed_new == InitResult("NOT_COORDINATOR") and "b" not in h.shard.ids


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(h: Harness) -> None:
    h.init()
    h.init("b", pid=101)
    h.add(100, 0, TP0)
    h.add(101, 0, TP0, txn="b")
    h.shard.ids["b"].timeout_ms = 10_000_000
    h.now[0] += 60_001
    h.run(h.shard.tick(h.now[0]))
    assert h.state() is S.PREPARE_ABORT and h.shard.ids["a"].producer_epoch == 1
    assert h.state("b") is S.ONGOING
    assert h.listener.seen == [("a", S.PREPARE_ABORT, 1)]
    assert h.end(100, 0, True) == "PRODUCER_FENCED"
    assert h.shard.next_deadline_ms() == h.now[0] + SETTINGS.abort_check_interval_ms


def test_idle_ids_expire_with_a_tombstone(h: Harness) -> None:
    h.init()
    h.init("b", pid=101)
    h.add(101, 0, TP0, txn="b")  # ongoing: never expires
    h.now[0] += SETTINGS.id_expiration_ms + SETTINGS.expiration_check_interval_ms
    h.shard.ids["b"].timeout_ms = SETTINGS.max_timeout_ms
    h.shard.ids["b"].start_ms = h.now[0]
    h.run(h.shard.tick(h.now[0]))
    assert "a" not in h.shard.ids and "b" in h.shard.ids
    assert h.log[-1] == (encode_key("a"), None)
    assert set(h.reload().ids) == {"b"}


def test_malformed_record_is_skipped(h: Harness) -> None:
    h.init()
    h.log.append((encode_key("bad"), b"\x00\x09garbage"))
    h.log.append((b"\x00", b"x"))
    assert set(h.reload().ids) == {"a"}


def test_load_hands_prepared_transactions_to_the_listener(h: Harness) -> None:
    h.init()
    h.add(100, 0, TP0)
    h.end(100, 0, True)
    h.listener.seen.clear()
    reloaded = h.reload()
    assert h.listener.seen == [("a", S.PREPARE_COMMIT, 0)]
    assert reloaded.ids["a"].partitions == {TP0}
    reloaded.on_unloaded()
    assert h.listener.unloads == 1 and not reloaded.serving


def test_kip588_a_timed_out_producer_claims_the_bumped_epoch(h: Harness) -> None:
    h.init()
    h.add(100, 0, TP0)
    h.now[0] += 60_001
    h.run(h.shard.tick(h.now[0]))
    h.complete(100, 1, False)
    # The producer that timed out re-initializes with the epoch it holds: it gets the
    # epoch the timeout bumped to, not a further bump.
    assert h.init(expected=(100, 0), pid=None) == InitResult("NONE", 100, 1)


def test_an_instance_fenced_by_a_new_one_cannot_claim_the_epoch_back(h: Harness) -> None:
    h.init()
    h.add(100, 0, TP0)
    assert h.init(pid=None) == InitResult("CONCURRENT_TRANSACTIONS")  # the new instance
    h.complete(100, 1, False)
    assert h.init(expected=(100, 0), pid=None) == InitResult("PRODUCER_FENCED")  # the zombie
