"""Model-based test of a log's transactions: aborted lists and LSO against a simple model.

Random interleavings of transactional producers' appends, commits and aborts, plain
batches, segment rolls (segment.bytes is a parameter, from tiny to the default),
flushes, high watermark moves, truncations and reopens (clean, and after a simulated
kill -9, with the recovered segments' ``.txnindex`` files damaged or deleted). The
model is the list of batches in the log; from it, the aborted transactions are a
full scan (every ABORT that ended an open transaction), so the log's segment-by-
segment search with its early stop must find exactly the brute-force answer, and the
first unstable offset is the oldest open transaction or completed one whose marker is
not below the high watermark.

One documented imprecision, Kafka's too: after a reload (truncation, reopen) the log
only knows the completed-but-unreplicated transactions whose marker it replayed, i.e.
from ``log.transactions.known_from`` on; the model forgets the older ones then.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from odradek.records.codec import Record, encode_batch
from odradek.storage.errors import InvalidTxnStateError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

T0 = 1_700_000_000_000
PIDS = (7000, 7001, 7002)


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class MBatch:
    base: int
    last: int
    producer_id: int  # -1: plain batch
    transactional: bool
    marker: bool | None = None  # None: data; True: COMMIT; False: ABORT
    last_seq: int = -1


def abandon(log: Log) -> None:
    for segment in log.segments + [s for _, s in log.pending_deletions]:
        for fd in (segment.fd, segment.offset_index._fd, segment.time_index._fd):
            if fd >= 0:
                os.close(fd)
        segment.fd = segment.offset_index._fd = segment.time_index._fd = -1
        segment.txn_index.abandon()
    log.closed = True


class TxnModel(RuleBasedStateMachine):
    @initialize(segment_bytes=st.sampled_from([250, 400, 900, 1024**3]))
    def setup(self, segment_bytes: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="odradek-txn-model-"))
        self.directory = self.root / "t-0"
        self.clock = Clock()
        self.config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1)
        self.log, _ = open_log(self.directory, self.config, clock=self.clock)
        self.batches: list[MBatch] = []
        self.hw = 0
        self.unreplicated: dict[int, int] = {}  # first offset -> marker offset
        self.values = 0

    def teardown(self) -> None:
        log = getattr(self, "log", None)
        if log is not None and not log.closed:
            log.close()
        if hasattr(self, "root"):
            shutil.rmtree(self.root, ignore_errors=True)

    # -- model ---------------------------------------------------------------------
    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    def replay(
        self, completed: dict[int, int] | None = None
    ) -> tuple[dict[int, int], list[AbortedTxn]]:
        """Open transactions (producer -> first offset) and every aborted one; fills
        ``completed`` (first offset -> marker offset) if given."""
        open_txns: dict[int, int] = {}
        aborted = []
        for b in self.batches:
            if b.producer_id < 0:
                continue
            if b.marker is not None:
                first = open_txns.pop(b.producer_id, None)
                if first is not None and completed is not None:
                    completed[first] = b.base
                if first is not None and not b.marker:
                    stable = min(open_txns.values(), default=b.base + 1)
                    aborted.append(AbortedTxn(b.producer_id, first, b.base, stable))
            elif b.transactional:
                open_txns.setdefault(b.producer_id, b.base)
        return open_txns, aborted

    def next_seq(self, producer_id: int) -> int:
        for b in reversed(self.batches):
            if b.producer_id == producer_id and b.marker is None:
                return b.last_seq + 1
        return 0

    def forget_unknown(self) -> None:
        """After a reload the log knows completions from ``known_from`` on (see above)."""
        completed: dict[int, int] = {}
        self.replay(completed)
        since = max(self.log.transactions.known_from, self.hw)
        self.unreplicated = {f: m for f, m in completed.items() if m >= since}

    # -- rules -----------------------------------------------------------------------
    @rule(pid=st.sampled_from((*PIDS, -1)), count=st.integers(1, 4), txn=st.booleans())
    def send(self, pid: int, count: int, txn: bool) -> None:
        txn = txn and pid >= 0
        seq = self.next_seq(pid) if pid >= 0 else -1
        records = [Record(i, T0 + i, None, f"v{self.values + i}".encode()) for i in range(count)]
        self.values += count
        data = encode_batch(
            records,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            is_transactional=txn,
        )
        open_txns, _ = self.replay()
        if pid >= 0 and not txn and pid in open_txns:
            try:
                self.log.append_as_leader(data, 0)
            except InvalidTxnStateError:
                return
            raise AssertionError("a plain batch inside a transaction was accepted")
        info = self.log.append_as_leader(data, 0)
        assert info.first_offset == self.end
        self.batches.append(MBatch(self.end, info.last_offset, pid, txn, None, seq + count - 1))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def end_txn(self, pid: int, commit: bool) -> None:
        open_txns, _ = self.replay()
        info = self.log.append_marker(pid, 0, 0, commit, 0)
        assert info.first_offset == self.end
        if pid in open_txns:
            self.unreplicated[open_txns[pid]] = info.first_offset
        self.batches.append(MBatch(self.end, self.end, pid, True, commit))

    @rule(
        ops=st.lists(
            st.tuples(st.sampled_from(PIDS), st.sampled_from(["txn", "txn", "abort", "commit"])),
            min_size=1,
            max_size=10,
        )
    )
    def burst(self, ops: list[tuple[int, str]]) -> None:
        """Many transactional steps at once: most runs then hold several aborts."""
        for pid, op in ops:
            if op == "txn":
                self.send(pid, 1 + pid % 3, True)
            else:
                self.end_txn(pid, op == "commit")

    @rule(fraction=st.floats(0, 1))
    def advance_hw(self, fraction: float) -> None:
        self.hw += int((self.end - self.hw) * fraction)
        self.log.high_watermark = self.hw
        self.unreplicated = {f: m for f, m in self.unreplicated.items() if m >= self.hw}

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()

    @rule(fraction=st.floats(0.3, 1))
    def truncate(self, fraction: float) -> None:
        offset = int(self.end * fraction)
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.last < offset]
        self.hw = min(self.hw, self.end)
        self.forget_unknown()

    @rule(clean=st.booleans(), damage=st.sampled_from(["none", "cut", "delete"]))
    def reopen(self, clean: bool, damage: str) -> None:
        recovery_point = self.log.recovery_point
        if clean:
            self.log.close()
        else:
            recovered = [s for s in self.log.segments if s.next_offset > recovery_point]
            abandon(self.log)
            # Files of segments recovery re-reads are rebuilt whatever they hold.
            for segment in recovered:
                path = segment.txn_index.path
                if damage == "delete":
                    path.unlink(missing_ok=True)
                elif damage == "cut" and path.exists() and path.stat().st_size:
                    path.write_bytes(path.read_bytes()[:-3])
        self.log, _ = open_log(
            self.directory,
            self.config,
            clock=self.clock,
            recovery_point=recovery_point,
            clean_shutdown=clean,
        )
        self.log.high_watermark = self.hw  # what the replica layer restores
        self.forget_unknown()

    # -- checks ----------------------------------------------------------------------
    @invariant()
    def offsets_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.end
        assert self.log.high_watermark == self.hw

    @invariant()
    def aborted_lists_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        _, aborted = self.replay()
        end = self.end
        holding = sum(1 for s in self.log.segments if s.txn_index.entries)
        event(f"aborted transactions >= {min(len(aborted), 5)}")
        event(f"segments holding entries >= {min(holding, 3)}")
        step = max(1, end // 5)
        for start in [*range(0, end, step), end]:
            for upper in [*range(start + 1, end + 1, step), end + 1]:
                expected = [a for a in aborted if a.last_offset >= start and a.first_offset < upper]
                assert self.log.collect_aborted_transactions(start, upper) == expected, (
                    start,
                    upper,
                )
        on_disk = sorted(p.name for p in self.directory.glob(f"*{TXN_INDEX_SUFFIX}"))
        with_entries = [s for s in self.log.segments if s.txn_index.entries]
        assert {f"{s.base_offset:020d}{TXN_INDEX_SUFFIX}" for s in with_entries} <= set(on_disk)

    @invariant()
    def stable_offsets_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        open_txns, _ = self.replay()
        firsts = list(open_txns.values()) + list(self.unreplicated)
        event(f"unreplicated completed: {bool(self.unreplicated)}")
        first_unstable = min(firsts) if firsts else None
        assert self.log.first_unstable_offset == first_unstable
        expected = self.hw if first_unstable is None else min(first_unstable, self.hw)
        assert self.log.last_stable_offset == expected
        state = self.log.producer_state.producers
        actual_open = {
            pid: e.current_txn_first_offset
            for pid, e in state.items()
            if e.current_txn_first_offset >= 0
        }
        assert actual_open == open_txns


TxnModel.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_transactions_model = TxnModel.TestCase
