"""Drive groups of real consumers (member.py processes) and check the group invariants.

``GroupRun`` starts members, stops them (SIGTERM: commit, close, leave) or kills them
(SIGKILL), feeds a topic with uniquely keyed records from a background producer, and
reads the members' shared events file. The invariants, checked on that log:

- **exclusive ownership**: replaying assign/revoke/lost lines in time order (a killed
  member owns nothing from its kill on), no partition is ever assigned to a member
  while another live member still owns it;
- **settled rebalances**: ``wait_settled`` polls until the live members' partitions
  are disjoint and cover the topic, every live member has some, and DescribeGroups
  agrees (Stable, the same members, the same assignment decoded from the group);
- **nothing skipped**: every produced key is consumed by someone;
- **duplicates only after a crash**: a record is consumed twice only if a killed
  member consumed it and had not committed past it.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.groups.wire import describe_one, wait_for
from tests.support.wire import WireClient

REPO = Path(__file__).resolve().parents[2]
TP = tuple[str, int]


def high_watermarks(wire: WireClient, topic: str, partitions: int) -> dict[TP, int]:
    from tests.server.test_protocol import list_offset

    return {(topic, p): list_offset(wire, topic, p, -1).offset for p in range(partitions)}


def decode_assignment(data: bytes) -> set[TP]:
    """The partitions of a ConsumerProtocolAssignment (every version starts alike)."""
    if not data:
        return set()
    position = 2
    (topics,) = struct.unpack_from(">i", data, position)
    position += 4
    out = set()
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", data, position)
        position += 2
        topic = data[position : position + length].decode()
        position += length
        (count,) = struct.unpack_from(">i", data, position)
        position += 4
        for _ in range(count):
            out.add((topic, struct.unpack_from(">i", data, position)[0]))
            position += 4
    return out


@dataclass
class MemberProcess:
    name: str
    process: subprocess.Popen[bytes]
    config: dict[str, Any]
    stderr_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Producer:
    """Keyed records k-<n> round-robin over a topic's partitions, in the background."""

    bootstrap: str
    topic: str
    partitions: int
    rate_per_s: float = 200.0
    delivered: set[str] = field(default_factory=set)
    sent: int = 0

    def __post_init__(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is None:
            with self._lock:
                self.delivered.add(message.key().decode())

    def produce(self, count: int, topic: str | None = None, partitions: int | None = None) -> None:
        from confluent_kafka import KafkaError, KafkaException

        topic, partitions = topic or self.topic, partitions or self.partitions
        # A topic that just grew: refresh the producer's metadata until it knows them.
        wait_for(
            lambda: (
                len(self._producer.list_topics(topic, 5).topics[topic].partitions) >= partitions
            ),
            15,
            f"{topic} with {partitions} partitions in the producer's metadata",
        )
        for _ in range(count):
            n = self.sent
            self.sent += 1
            try:
                self._producer.produce(
                    topic,
                    key=f"k-{n}",
                    value=b"v",
                    partition=n % partitions,
                    on_delivery=self._on_delivery,
                )
            except KafkaException as error:
                assert error.args[0].code() != KafkaError._UNKNOWN_PARTITION, error
                raise
        self._producer.flush(30)

    def start(self) -> None:
        def run() -> None:
            while not self._stop.is_set():
                n = self.sent
                self.sent += 1
                self._producer.produce(
                    self.topic,
                    key=f"k-{n}",
                    value=b"v",
                    partition=n % self.partitions,
                    on_delivery=self._on_delivery,
                )
                self._producer.poll(0)
                self._stop.wait(1.0 / self.rate_per_s)
            self._producer.flush(30)

        self._thread = threading.Thread(target=run, name="producer", daemon=True)
        self._thread.start()

    def stop(self) -> set[str]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        self._producer.flush(30)
        assert len(self.delivered) == self.sent, (len(self.delivered), self.sent)
        return set(self.delivered)


class GroupRun:
    def __init__(
        self,
        tmp_path: Path,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        *,
        client: str = "confluent",
        assignor: str = "range",
        session_ms: int = 2000,
        heartbeat_ms: int = 300,
        metadata_refresh_ms: int = 1000,
        commit_interval_s: float = 0.3,
    ) -> None:
        self.tmp_path = tmp_path
        self.bootstrap = bootstrap
        self.group = group
        self.topics = list(topics)
        self.events_path = tmp_path / f"{group}-events.jsonl"
        self.defaults = {
            "bootstrap": bootstrap,
            "group": group,
            "topics": self.topics,
            "client": client,
            "assignor": assignor,
            "session_ms": session_ms,
            "heartbeat_ms": heartbeat_ms,
            "metadata_refresh_ms": metadata_refresh_ms,
            "commit_interval_s": commit_interval_s,
            "events": str(self.events_path),
        }
        self.members: dict[str, MemberProcess] = {}
        self.killed: set[str] = set()
        self._log_fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # -- members -------------------------------------------------------------------------
    def start(self, name: str, **overrides: Any) -> MemberProcess:
        assert name not in self.members or not self.members[name].alive()
        config = {**self.defaults, **overrides, "name": name}
        stderr_path = self.tmp_path / f"{name}.stderr"
        with open(stderr_path, "ab") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.groups.member", json.dumps(config)],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        member = MemberProcess(name, process, config, stderr_path)
        self.members[name] = member
        self.killed.discard(name)
        return member

    def stop(self, name: str, timeout_s: float = 30.0) -> None:
        """SIGTERM: the member commits, closes and leaves; it must exit cleanly."""
        member = self.members[name]
        os.kill(member.process.pid, signal.SIGTERM)
        try:
            code = member.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            # Where it hangs (member.py registers faulthandler on SIGUSR1), then fail.
            os.kill(member.process.pid, signal.SIGUSR1)
            time.sleep(1)
            member.process.kill()
            member.process.wait()
            stacks = member.stderr_path.read_text()[-6000:]
            raise AssertionError(
                f"{name} did not exit {timeout_s} s after SIGTERM:\n{stacks}"
            ) from None
        assert code == 0, f"{name} exited {code}: {member.stderr_path.read_text()[-3000:]}"
        assert any(e["ev"] == "exit" and e["m"] == name for e in self.events())

    def kill(self, name: str) -> None:
        """kill -9: the member's partitions move only after its session times out."""
        member = self.members[name]
        os.kill(member.process.pid, signal.SIGKILL)
        member.process.wait()
        self.killed.add(name)
        self._note("killed", name)

    def _note(self, event: str, name: str) -> None:
        line = json.dumps({"t": time.time(), "m": name, "ev": event}) + "\n"
        os.write(self._log_fd, line.encode())

    def close(self) -> None:
        """Stop whatever still runs (by pid): SIGTERM, then SIGKILL."""
        for member in self.members.values():
            if member.alive():
                os.kill(member.process.pid, signal.SIGTERM)
        for member in self.members.values():
            try:
                member.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(member.process.pid, signal.SIGKILL)
                member.process.wait()
        os.close(self._log_fd)

    def assert_no_crash(self) -> None:
        """A member that died on its own (not killed, not stopped) fails the test."""
        for name, member in self.members.items():
            code = member.process.poll()
            if code is not None and code != 0 and name not in self.killed:
                raise AssertionError(
                    f"member {name} died ({code}):\n"
                    f"{member.stderr_path.read_text(errors='replace')[-3000:]}"
                )

    def live(self) -> list[str]:
        return [n for n, m in self.members.items() if m.alive()]

    def stderr_tail(self) -> str:
        return "\n".join(
            f"--- {n} stderr ---\n{m.stderr_path.read_text(errors='replace')[-2000:]}"
            for n, m in self.members.items()
            if m.stderr_path.exists()
        )

    # -- the events log ------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        out = []
        with open(self.events_path, "rb") as log:
            for line in log:
                if line.endswith(b"\n"):
                    out.append(json.loads(line))
        out.sort(key=lambda e: e["t"])
        return out

    def ownership(self, events: Iterable[dict[str, Any]] | None = None) -> dict[str, set[TP]]:
        """Who owns what after the events, checking exclusive ownership on the way."""
        owned: dict[str, set[TP]] = defaultdict(set)
        incremental: dict[str, bool] = {}
        for event in self.events() if events is None else events:
            name, kind = event["m"], event["ev"]
            if kind == "assign":
                parts = {(t, p) for t, p in event["parts"]}
                for other, theirs in owned.items():
                    clash = parts & theirs
                    assert other == name or not clash, (
                        f"{name} was assigned {sorted(clash)} at {event['t']:.3f} while "
                        f"{other} still owned them"
                    )
                # An eager client's assign is its whole assignment (see silent_resets).
                owned[name] = owned[name] | parts if incremental.get(name) else parts
            elif kind in ("revoke", "lost"):
                owned[name] -= {(t, p) for t, p in event["parts"]}
            elif kind in ("killed", "exit", "start"):
                if kind == "exit":
                    assert not owned[name], f"{name} exited still owning {owned[name]}"
                if kind == "start":
                    incremental[name] = event.get("incremental", False)
                owned[name] = set()
        return {n: s for n, s in owned.items() if s}

    def wait_settled(
        self,
        partitions: set[TP],
        timeout_s: float = 30.0,
        members: Sequence[str] | None = None,
    ) -> dict[str, set[TP]]:
        """Poll until the live members own all ``partitions`` exclusively, each some,
        and DescribeGroups shows the same Stable group."""
        expected = sorted(members if members is not None else self.live())

        def settled() -> dict[str, set[TP]] | None:
            self.assert_no_crash()
            owned = self.ownership()
            mine = {n: s for n, s in owned.items() if n in expected}
            if sorted(mine) != expected or set(owned) - set(expected):
                return None
            union: set[TP] = set().union(*mine.values())
            if union != partitions or sum(len(s) for s in mine.values()) != len(partitions):
                return None
            with WireClient(self.bootstrap) as wire:
                described = describe_one(wire, self.group)
            if described.group_state != "Stable":
                return None
            by_client = {
                m.client_id: decode_assignment(m.member_assignment) for m in described.members
            }
            if sorted(by_client) != expected or len(described.members) != len(expected):
                return None
            wanted = {
                n: {tp for tp in s if tp[0] in {t for t, _ in partitions}}
                for n, s in by_client.items()
            }
            if wanted != mine:
                return None
            return mine

        try:
            result: dict[str, set[TP]] = wait_for(settled, timeout_s, "a settled group")
        except AssertionError:
            raise AssertionError(
                f"group did not settle on {expected}; ownership {self.ownership()}\n"
                f"{self.stderr_tail()}"
            ) from None
        return result

    def consumed(self) -> list[tuple[str, str, int, int, str | None, float]]:
        """(member, topic, partition, offset, key, time) of every record consumed."""
        return [
            (e["m"], t, p, o, k, e["t"])
            for e in self.events()
            if e["ev"] == "recs"
            for t, p, o, k in e["recs"]
        ]

    def wait_consumed(self, keys: set[str], timeout_s: float = 30.0) -> None:
        def done() -> bool:
            self.assert_no_crash()
            return keys <= {r[4] for r in self.consumed()}

        try:
            wait_for(done, timeout_s, "every produced key consumed")
        except AssertionError:
            missing = keys - {r[4] for r in self.consumed()}
            raise AssertionError(
                f"{len(missing)} keys never consumed, e.g. {sorted(missing)[:10]}; "
                f"ownership {self.ownership()}\n{self.stderr_tail()}"
            ) from None

    def check(self, produced: set[str]) -> dict[str, int]:
        """The final invariants; returns counts for the report."""
        events = self.events()
        self.ownership(events)  # exclusive ownership all along
        records = self.consumed()
        keys = {r[4] for r in records}
        missing = produced - keys
        assert not missing, f"skipped: {sorted(missing)[:20]}"
        allowed = self._crash_redelivery_allowance(events)
        counts = Counter((t, p, o) for _, t, p, o, _, _ in records)
        duplicates = {rec for rec, n in counts.items() if n > 1}
        unexpected = duplicates - allowed
        assert not unexpected, (
            f"{len(unexpected)} records consumed twice in normal operation, e.g. "
            f"{sorted(unexpected)[:10]}; {self._who(records, sorted(unexpected)[:3])}"
        )
        # A periodic commit racing a rebalance may be refused (ILLEGAL_GENERATION,
        # REBALANCE_IN_PROGRESS), as with Kafka; the commit on revoke covers it. Nothing
        # else may go wrong: no lost partitions, no consume errors.
        errors = [e for e in events if e["ev"] in ("commit_error", "consume_error", "lost")]
        expected = (
            "ILLEGAL_GENERATION",
            "REBALANCE_IN_PROGRESS",
            "RebalanceInProgress",
            "IllegalGeneration",
            "CommitFailed",
        )
        unexpected_errors = [
            e
            for e in errors
            if e["ev"] != "commit_error" or not any(x in e["error"] for x in expected)
        ]
        assert not unexpected_errors, unexpected_errors[:10]
        return {
            "records": len(records),
            "duplicates": len(duplicates),
            "crash_window": len(allowed),
            "events": len(events),
            "errors": len(errors),
        }

    @staticmethod
    def _who(records: list[Any], keys: list[tuple[str, int, int]]) -> str:
        return "; ".join(
            f"{k}: " + ", ".join(f"{m}@{t:.3f}" for m, tp, p, o, _, t in records if (tp, p, o) == k)
            for k in keys
        )

    @staticmethod
    def _crash_redelivery_allowance(events: list[dict[str, Any]]) -> set[tuple[str, int, int]]:
        """Records a killed member consumed at or after its last commit of the partition.

        Also, for an eager client whose assign arrives while it still owns partitions
        (no revoke logged first: when a pattern subscription matches a new topic,
        aiokafka drops its positions before calling the revoke listener, whose commit
        then fails on partitions no longer assigned, so nothing could be committed),
        what it consumed of those partitions since its last commit."""
        allowed: set[tuple[str, int, int]] = set()
        committed: dict[tuple[str, str, int], int] = {}
        consumed: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
        owned: dict[str, set[TP]] = defaultdict(set)
        incremental: dict[str, bool] = {}

        def uncommitted(name: str, parts: set[TP]) -> set[tuple[str, int, int]]:
            return {
                (t, p, o)
                for t, p, o in consumed[name]
                if (t, p) in parts and o >= committed.get((name, t, p), -1)
            }

        for event in events:
            name, kind = event["m"], event["ev"]
            if kind == "commit":
                for t, p, o in event["offsets"]:
                    committed[(name, t, p)] = o
            elif kind == "recs":
                consumed[name].extend((t, p, o) for t, p, o, _ in event["recs"])
            elif kind == "assign":
                parts = {(t, p) for t, p in event["parts"]}
                if not incremental.get(name):
                    allowed |= uncommitted(name, owned[name])
                    owned[name] = parts
                else:
                    owned[name] |= parts
            elif kind in ("revoke", "lost"):
                owned[name] -= {(t, p) for t, p in event["parts"]}
            elif kind == "killed":
                allowed |= uncommitted(name, {(t, p) for t, p, _ in consumed[name]})
                consumed.pop(name, None)
                owned[name] = set()
            elif kind == "start":
                incremental[name] = event.get("incremental", False)
                consumed.pop(name, None)
                owned[name] = set()
        return allowed


def churn(
    run: GroupRun, everything: set[TP], session_ms: int, clients: Sequence[str] | None = None
) -> None:
    """The membership changes every client is put through, settling after each: one
    member, three, one leaves cleanly, a fourth joins, one is killed (its partitions
    move once its session times out). ``clients`` picks each member's client in turn
    (a, b, c, d) for mixed groups. Leaves members "a" and "d" running."""

    def start(name: str, index: int) -> None:
        if clients is None:
            run.start(name)
        else:
            run.start(name, client=clients[index % len(clients)])

    start("a", 0)
    run.wait_settled(everything)
    start("b", 1)
    start("c", 2)
    three = run.wait_settled(everything)
    assert sorted(len(parts) for parts in three.values()) == [4, 4, 4], three
    run.stop("b")  # clean leave: commit, revoke, LeaveGroup
    run.wait_settled(everything)
    start("d", 3)
    run.wait_settled(everything)
    killed_at = time.monotonic()
    run.kill("c")
    run.wait_settled(everything)
    assert time.monotonic() - killed_at > session_ms / 1000 * 0.75
