"""Consumer-group benchmark: rebalance latency of 10 consumers and offset-commit rate.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/groups.py [--quick]``
(``--help`` lists the knobs; ``--keep`` keeps the members' librdkafka logs). ``--quick``
takes about 25 s, the full run about a minute.

What is measured, and how:

- Broker: ``python -m odradek serve`` on 127.0.0.1:0, data in a fresh
  ``var/bench-groups-*/`` directory (deleted at the end), with
  ``group.initial.rebalance.delay.ms`` set (printed) and, for KIP-848,
  ``group.consumer.heartbeat.interval.ms``. One topic of 20 partitions, no records.
- Members: 10 confluent-kafka consumers, each in its own process (this script with
  ``--worker``), classic protocol, ``partition.assignment.strategy`` range (eager),
  auto commit off, ``max.poll.interval.ms`` (the rebalance timeout) printed, and
  ``session.timeout.ms`` / ``heartbeat.interval.ms`` 45000 / 3000 (librdkafka's
  defaults) and 6000 / 500 (the broker's minimum session; ``--quick``: only this).
  Each polls with a 50 ms timeout and reports, on stdout, the wall-clock time of its
  ``subscribe`` call and of every ``on_assign`` / ``on_revoke`` callback with the
  partitions it then owns. Its librdkafka debug log (``debug=cgrp,protocol``,
  librdkafka's own stderr logger, which stamps each line with gettimeofday at ms
  resolution) gives the times requests were sent: JoinGroup, SyncGroup, LeaveGroup,
  heartbeats, and the generation of each JoinGroup response. Everything runs on one
  machine, one clock.
- Initial join: all members are started and connected (coordinator found) first,
  then told to ``subscribe`` at the same instant. Stable = every member has had its
  ``on_assign`` of the final generation and every partition is owned exactly once;
  this is checked on the members' own reports, on their logs (same generation
  everywhere) and on DescribeGroups (state Stable, the same member count and
  assignment). Time to stable is from the first ``subscribe`` call to the last
  ``on_assign``; the broker holds the first generation open for the initial delay
  (restarted while members keep arriving, as Kafka does: members that all join within
  the first delay wait two), so the time minus the delay is shown too.
- Leave: one member ``close()``s (revoke, then a clean LeaveGroup) and the others
  learn of the rebalance on their next heartbeat, revoke and rejoin. Rebalance
  latency = from the leaving member's LeaveGroup being sent to the last remaining
  member's ``on_assign``. A member's rejoin time = from that LeaveGroup to its own
  JoinGroup being sent: bounded by its heartbeat interval, not by the broker. Goal:
  rebalance latency ≤ 1.5x the slowest member's rejoin time (each leave is judged);
  the difference is the broker finishing the join phase once the last member is in,
  the leader's assignment, SyncGroup, and the callbacks. Several members leave in turn,
  each at the moment farthest from every member's next heartbeat (found from their
  logs; see ``leave_time``): since all members joined together and heartbeat in step,
  that is half an interval before their heartbeats, so the rejoin time is about half
  the heartbeat interval, never a few ms that would make the ratio meaningless.
- Offset commits: one consumer process (a member of its own group, all 20 partitions
  assigned) calls ``commit(offsets=..., asynchronous=False)`` in a loop, each time with
  new offsets for 1 partition, then for all 20; then the same process runs
  acks=all (idempotent) produce round trips of one 100 B record followed by ``flush()``
  on another topic, for scale: the same client machinery waiting for one answer. The
  broker's CPU over each loop is read from ``/proc/<pid>/stat``. The committed offsets
  are read back and checked.
- KIP-848: when the broker advertises ConsumerGroupHeartbeat (API key 68) in
  ApiVersions, the initial join and leaves are repeated with ``group.protocol=consumer``
  (server-side assignor, heartbeat interval set on the broker, no initial delay); only
  the members whose assignment changes take part in a rebalance, and their "rejoin" is
  their first ConsumerGroupHeartbeat after the leave. Members reconcile over several
  heartbeats, so stable also needs two heartbeat intervals without a callback, after
  which every member must report the same member epoch. Otherwise "not available".

Other processes share the 2 cores and skew all of this, so the load average is printed
at start and end, with a warning above 1.5.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import re
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from _support import OdradekBroker, finish, load_average, show_load, warn_if_busy  # noqa: E402

READY_TIMEOUT_S = 60.0
REBALANCE_GOAL = 1.5  # rebalance latency / slowest member's rejoin time, at most
MEMBERS = 10
PARTITIONS = 20
TOPIC = "bench-groups"
RTT_TOPIC = "bench-groups-rtt"
DEBUG = "cgrp,protocol"
POLL_S = 0.05
MAX_POLL_INTERVAL_MS = 300_000
CONSUMER_HEARTBEAT_MS = 500  # group.consumer.heartbeat.interval.ms (KIP-848, broker side)
CONSUMER_GROUP_HEARTBEAT_KEY = 68
ROUNDING_S = 0.0015  # librdkafka log times are truncated to ms; ours are not


# -- environment -------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid``, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# -- the broker ------------------------------------------------------------------------------


class Odradek(OdradekBroker):
    def __init__(self, workdir: Path, overrides: dict[str, str]) -> None:
        args = [arg for key, value in overrides.items() for arg in ("--override", f"{key}={value}")]
        super().__init__(workdir, args, ready_timeout_s=READY_TIMEOUT_S)

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0, by hand: {api key: (min version, max version)}."""
        host, port = self.bootstrap.rsplit(":", 1)
        client_id = b"bench-groups"
        body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", receive(sock, 4))[0]
            data = receive(sock, size)
        _correlation, error, count = struct.unpack_from(">ihi", data)
        if error:
            raise RuntimeError(f"ApiVersions v0 answered error {error}")
        entries = (struct.unpack_from(">hhh", data, 10 + 6 * i) for i in range(count))
        return {key: (low, high) for key, low, high in entries}

    def describe_group(self, group: str) -> Any:
        return self.admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)


def receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("connection closed")
        data += chunk
    return data


# -- workers (child processes: ``groups.py --worker SPEC``) -----------------------------------
def consumer_config(spec: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": spec["bootstrap"],
        "group.id": spec["group"],
        "client.id": spec.get("client_id", "bench-groups"),
        "enable.auto.commit": False,
        "debug": DEBUG,
    }
    if spec.get("protocol", "classic") == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": spec["session_timeout_ms"],
                "heartbeat.interval.ms": spec["heartbeat_interval_ms"],
                "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
                "partition.assignment.strategy": "range",
            }
        )
    return config


def read_commands(commands: queue.Queue[dict[str, Any]]) -> None:
    for line in sys.stdin:
        if line.strip():
            commands.put(json.loads(line))
    commands.put({"cmd": "close"})  # stdin closed: the parent is gone


def member_worker(spec: dict[str, Any]) -> int:
    """One group member: reports its subscribe call and rebalance callbacks on stdout."""
    from confluent_kafka import Consumer

    def emit(event: str, at: float, **fields: Any) -> None:
        print(json.dumps({"event": event, "t": at, **fields}), flush=True)

    owned: set[int] = set()

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        at = time.time()
        owned.update(p.partition for p in partitions)
        emit("assign", at, partitions=sorted(owned), changed=len(partitions))

    def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
        at = time.time()
        owned.difference_update(p.partition for p in partitions)
        emit("revoke", at, partitions=sorted(owned), changed=len(partitions))

    def on_lost(_consumer: Any, partitions: list[Any]) -> None:
        at = time.time()
        owned.difference_update(p.partition for p in partitions)
        emit("lost", at, partitions=sorted(owned), changed=len(partitions))

    def on_error(error: Any) -> None:
        emit("error", time.time(), error=str(error))

    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
    consumer = Consumer({**consumer_config(spec), "error_cb": on_error})
    consumer.list_topics(spec["topic"], timeout=20)  # connected, metadata known
    # librdkafka finds the coordinator on its own as soon as it has a broker.
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        consumer.poll(POLL_S)
    emit("ready", time.time())
    while True:
        message = consumer.poll(POLL_S)
        if message is not None and message.error() is not None:
            emit("error", time.time(), error=str(message.error()))
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command["cmd"] == "subscribe":
            time.sleep(max(0.0, command["at"] - time.time()))
            at = time.time()
            consumer.subscribe(
                [spec["topic"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
            )
            emit("subscribed", at)
        elif command["cmd"] == "close":
            time.sleep(max(0.0, command.get("at", 0.0) - time.time()))
            at = time.time()
            consumer.close()
            emit("closed", at, end=time.time())
            return 0


def commit_worker(spec: dict[str, Any]) -> int:
    """Synchronous offset commits (1 and 20 partitions), then acks=all round trips."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, partitions, seconds = spec["topic"], spec["partitions"], spec["seconds"]
    broker_pid = spec["broker_pid"]
    assigned: list[int] = []
    config = consumer_config(spec)
    del config["debug"]
    consumer = Consumer(config)
    consumer.subscribe(
        [topic], on_assign=lambda _c, parts: assigned.extend(p.partition for p in parts)
    )
    deadline = time.monotonic() + 60
    while len(assigned) < partitions:
        consumer.poll(POLL_S)
        if time.monotonic() > deadline:
            raise RuntimeError(f"commit worker: only {len(assigned)} partitions assigned")
    offset = 0

    def timed(run_one: Callable[[], None], warmup_s: float) -> dict[str, float]:
        end = time.perf_counter() + warmup_s
        while time.perf_counter() < end:
            run_one()
        count = 0
        cpu_start = process_cpu_s(broker_pid)
        started = time.perf_counter()
        end = started + seconds
        while time.perf_counter() < end:
            run_one()
            count += 1
        elapsed = time.perf_counter() - started
        broker_cpu = (process_cpu_s(broker_pid) - cpu_start) / elapsed
        return {"count": count, "seconds": elapsed, "broker_cpu": broker_cpu}

    results: dict[str, Any] = {}
    for width in (1, partitions):

        def commit(width: int = width) -> None:
            nonlocal offset
            offset += 1
            offsets = [TopicPartition(topic, p, offset) for p in range(width)]
            consumer.commit(offsets=offsets, asynchronous=False)

        results[f"commit-{width}"] = timed(commit, spec["warmup_s"])
    committed = consumer.committed(
        [TopicPartition(topic, p) for p in range(partitions)], timeout=10
    )
    got = [tp.offset for tp in committed]
    if got != [offset] * partitions:
        raise RuntimeError(f"committed offsets read back {got}, expected {offset} everywhere")

    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "on_delivery": on_delivery,
        }
    )
    producer.list_topics(spec["rtt_topic"], timeout=20)
    value = os.urandom(100)

    def produce() -> None:
        producer.produce(spec["rtt_topic"], value, partition=0)
        if producer.flush(10):
            failures.append("flush timed out")

    results["produce"] = timed(produce, spec["warmup_s"])
    if failures:
        raise RuntimeError(f"{len(failures)} failed deliveries; first: {failures[0]}")
    consumer.close()
    print(json.dumps(results), flush=True)
    return 0


def worker_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    if spec["kind"] == "member":
        return member_worker(spec)
    return commit_worker(spec)


def worker_command(spec: dict[str, Any]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]


# -- the members, seen from here ---------------------------------------------------------------
LOG_LINE = re.compile(r"^%\d+\|(\d+\.\d+)\|([A-Z_]+)\|[^|]*\| \[thrd:[^\]]*\]: (.*)$")
JOIN_RESPONSE = re.compile(r"JoinGroup response: GenerationId (-?\d+),.*: (.*)$")
EPOCH = re.compile(r"ConsumerGroupHeartbeat response received for member id .* with epoch (-?\d+)")


@dataclass
class ClientLog:
    """What a member's librdkafka debug log says, as (wall-clock time, ...) lists."""

    joins_sent: list[float] = field(default_factory=list)
    join_responses: list[tuple[float, int, bool]] = field(default_factory=list)
    syncs_sent: list[float] = field(default_factory=list)
    leaves_sent: list[float] = field(default_factory=list)
    heartbeats_sent: list[float] = field(default_factory=list)  # either protocol's
    epochs: list[int] = field(default_factory=list)  # from ConsumerGroupHeartbeat responses

    @classmethod
    def parse(cls, path: Path) -> ClientLog:
        log = cls()
        with open(path, errors="replace") as lines:
            for line in lines:
                match = LOG_LINE.match(line)
                if match is None:
                    continue
                at, facility, text = float(match[1]), match[2], match[3]
                if facility == "SEND":
                    if "Sent JoinGroupRequest" in text:
                        log.joins_sent.append(at)
                    elif "Sent SyncGroupRequest" in text:
                        log.syncs_sent.append(at)
                    elif "Sent LeaveGroupRequest" in text:
                        log.leaves_sent.append(at)
                    elif (
                        "Sent HeartbeatRequest" in text
                        or "Sent ConsumerGroupHeartbeatRequest" in text
                    ):
                        log.heartbeats_sent.append(at)
                elif facility == "JOINGROUP":
                    response = JOIN_RESPONSE.search(text)
                    if response:
                        ok = response[2] == "(no error)"
                        log.join_responses.append((at, int(response[1]), ok))
                elif facility == "HEARTBEAT":
                    epoch = EPOCH.search(text)
                    if epoch:
                        log.epochs.append(int(epoch[1]))
        return log


def first_at_or_after(times: list[float], start: float) -> float | None:
    return next((t for t in times if t >= start - ROUNDING_S), None)


class Member:
    def __init__(self, index: int, spec: dict[str, Any], log_path: Path) -> None:
        self.index = index
        self.log_path = log_path
        log = open(log_path, "wb")  # noqa: SIM115 - closed below, kept by the child
        self.process = subprocess.Popen(
            worker_command({**spec, "kind": "member", "client_id": f"member-{index}"}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
        )
        log.close()
        self.events: list[dict[str, Any]] = []
        self.buffer = b""
        self.eof = False
        self.left = False  # told to close
        self.partitions: tuple[int, ...] = ()

    @property
    def fd(self) -> int:
        assert self.process.stdout is not None
        return self.process.stdout.fileno()

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            self.eof = True
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            event = json.loads(line)
            self.events.append(event)
            if "partitions" in event:
                self.partitions = tuple(event["partitions"])

    def times(self, kind: str, since: float = 0.0) -> list[float]:
        return [e["t"] for e in self.events if e["event"] == kind and e["t"] >= since]

    def has(self, kind: str) -> bool:
        return any(e["event"] == kind for e in self.events)

    def client_log(self) -> ClientLog:
        return ClientLog.parse(self.log_path)

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join([line for line in text if not line.startswith("%7|")][-lines:])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Fleet:
    """The member processes of one scenario, and their reports."""

    def __init__(self, count: int, spec: dict[str, Any], workdir: Path, name: str) -> None:
        self.members: list[Member] = []
        try:
            for index in range(count):
                self.members.append(Member(index, spec, workdir / f"{name}-member-{index}.log"))
        except BaseException:
            self.stop()
            raise

    @property
    def live(self) -> list[Member]:
        return [m for m in self.members if not m.left]

    def pump(self, timeout_s: float) -> None:
        open_members = {m.fd: m for m in self.members if not m.eof}
        if not open_members:
            time.sleep(timeout_s)
            return
        ready, _, _ = select.select(list(open_members), [], [], timeout_s)
        for fd in ready:
            open_members[fd].feed(os.read(fd, 65536))

    def wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            for member in self.members:
                if member.eof and not member.has("closed"):
                    raise RuntimeError(
                        f"member {member.index} exited ({member.process.poll()}) while "
                        f"waiting for {what}:\n{member.log_tail()}"
                    )
                errors = [e["error"] for e in member.events if e["event"] == "error"]
                if errors:
                    raise RuntimeError(f"member {member.index}: {errors[0]}")
            if time.monotonic() > deadline:
                owned = {m.index: m.partitions for m in self.live}
                raise RuntimeError(f"timed out waiting for {what}; partitions owned: {owned}")
            self.pump(0.05)

    def rebalance_events(self) -> int:
        kinds = ("assign", "revoke", "lost")
        return sum(e["event"] in kinds for m in self.members for e in m.events)

    def wait_stable(
        self, timeout_s: float, what: str, settle_s: float = 0.0, leaving: Member | None = None
    ) -> float:
        """Wait until stable (and no callback for ``settle_s`` after); the last on_assign time."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.wait(
                lambda: (leaving is None or leaving.has("closed")) and self.stable(),
                deadline - time.monotonic(),
                what,
            )
            seen = self.rebalance_events()
            settled = time.monotonic() + settle_s
            while time.monotonic() < settled:
                self.pump(settled - time.monotonic())
            if seen == self.rebalance_events() and self.stable():
                return max(m.times("assign")[-1] for m in self.live)

    def stable(self) -> bool:
        """Every live member owns partitions, and each partition is owned exactly once."""
        live = self.live
        if not live or not all(m.partitions for m in live):
            return False
        owned = Counter(p for m in live for p in m.partitions)
        return sorted(owned) == list(range(PARTITIONS)) and max(owned.values()) == 1

    def stop(self) -> None:
        for member in self.members:
            if not member.left and member.process.poll() is None:
                with contextlib.suppress(OSError):
                    member.send({"cmd": "close"})
                member.left = True
        for member in self.members:
            member.stop()


# -- scenarios ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    protocol: str = "classic"

    @property
    def label(self) -> str:
        if self.protocol == "consumer":
            return f"KIP-848, broker heartbeat {CONSUMER_HEARTBEAT_MS} ms"
        return f"session {self.session_timeout_ms} / heartbeat {self.heartbeat_interval_ms} ms"

    @property
    def heartbeat_s(self) -> float:
        ms = CONSUMER_HEARTBEAT_MS if self.protocol == "consumer" else self.heartbeat_interval_ms
        return ms / 1000


@dataclass
class Initial:
    stable_s: float  # first subscribe call → last on_assign
    first_join_s: float | None  # first subscribe → every member has sent its first JoinGroup
    join_held_s: float | None  # last JoinGroup sent → first JoinGroup response of the final gen
    sync_s: float | None  # first JoinGroup response of the final gen → last on_assign
    generation: int | None  # classic: generation; KIP-848: member epoch


@dataclass
class Leave:
    members_before: int
    latency_s: float  # LeaveGroup sent → last on_assign
    rejoins_s: list[float]  # per (affected) remaining member: LeaveGroup sent → its rejoin
    join_done_s: float | None  # last rejoin → first JoinGroup response of the new generation
    generation: int | None

    @property
    def slowest_s(self) -> float:
        return max(self.rejoins_s)

    @property
    def ratio(self) -> float:
        return self.latency_s / self.slowest_s if self.slowest_s > 0 else float("inf")


@dataclass
class Scenario:
    setting: Setting
    initial: Initial | None = None
    leaves: list[Leave] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # failed checks (broker bugs?)
    error: str | None = None


def final_generation(logs: list[ClientLog], since: float) -> tuple[int | None, float | None, str]:
    """(generation all members ended in, first response time of it, problem or "")."""
    last = [[r for r in log.join_responses if r[2] and r[0] >= since - ROUNDING_S] for log in logs]
    if not all(last):
        return None, None, "a member's log has no successful JoinGroup response"
    generations = {responses[-1][1] for responses in last}
    if len(generations) != 1:
        return None, None, f"members ended in different generations {sorted(generations)}"
    generation = generations.pop()
    answered = min(r[0] for responses in last for r in responses if r[1] == generation)
    return generation, answered, ""


def final_epoch(logs: list[ClientLog]) -> tuple[int | None, str]:
    """KIP-848: (member epoch every member ended with, problem or "")."""
    if not all(log.epochs for log in logs):
        return None, "a member's log has no ConsumerGroupHeartbeat response"
    epochs = {log.epochs[-1] for log in logs}
    if len(epochs) != 1:
        return None, f"members ended with different member epochs {sorted(epochs)}"
    return epochs.pop(), ""


def check_described(odradek: Odradek, group: str, fleet: Fleet, classic: bool) -> str:
    """ "" if DescribeGroups shows the stable group the members report, else the problem."""
    from confluent_kafka import ConsumerGroupState

    try:
        description = odradek.describe_group(group)
    except Exception as error:  # the broker's answer is what is being checked
        return f"DescribeGroups failed: {error}"
    live = fleet.live
    if description.state != ConsumerGroupState.STABLE:
        return f"DescribeGroups state {description.state}, expected STABLE"
    if len(description.members) != len(live):
        return f"DescribeGroups lists {len(description.members)} members, expected {len(live)}"
    described = sorted(
        tuple(sorted(tp.partition for tp in m.assignment.topic_partitions))
        for m in description.members
    )
    reported = sorted(m.partitions for m in live)
    if described != reported:
        return f"DescribeGroups assignment {described} differs from the members' {reported}"
    return ""


def run_scenario(
    odradek: Odradek,
    setting: Setting,
    workdir: Path,
    leaves: int,
    initial_delay_ms: int,
    members: int,
) -> Scenario:
    result = Scenario(setting)
    classic = setting.protocol == "classic"
    heartbeat_s = setting.heartbeat_s
    name = f"{setting.protocol}-{heartbeat_s * 1000:.0f}"
    group = f"bench-{name}"
    spec = {
        "bootstrap": odradek.bootstrap,
        "topic": TOPIC,
        "group": group,
        "protocol": setting.protocol,
        "session_timeout_ms": setting.session_timeout_ms,
        "heartbeat_interval_ms": setting.heartbeat_interval_ms,
    }
    # KIP-848 members reconcile over several heartbeats and need not all take part in a
    # change: the group counts as stable once nothing moved for two heartbeat intervals
    # (so every member has also heartbeated its new epoch).
    settle_s = 0.0 if classic else 2 * heartbeat_s + 0.1
    progress(f"{setting.label}: starting {members} consumer processes")
    fleet = Fleet(members, spec, workdir, name)
    try:
        fleet.wait(
            lambda: all(m.has("ready") for m in fleet.members), READY_TIMEOUT_S, "members ready"
        )
        progress(f"{setting.label}: subscribe")
        at = time.time() + 0.2
        for member in fleet.members:
            member.send({"cmd": "subscribe", "at": at})
        timeout = 2 * initial_delay_ms / 1000 + 30 + 3 * heartbeat_s
        stable_at = fleet.wait_stable(timeout, "the initial join", settle_s)
        start = min(t for m in fleet.members for t in m.times("subscribed"))
        result.initial, problem = analyse_initial(fleet, start, stable_at, classic)
        problem = problem or check_described(odradek, group, fleet, classic)
        if problem:
            result.problems.append(f"initial join: {problem}")
        for number in range(leaves):
            if len(fleet.live) < 2:
                break
            leaving = fleet.live[-1]
            before = len(fleet.live)
            close_at = leave_time(fleet, heartbeat_s)
            progress(f"{setting.label}: member {leaving.index} leaves ({before} → {before - 1})")
            leaving.send({"cmd": "close", "at": close_at})
            leaving.left = True
            what = f"the group to settle after leave {number + 1}"
            stable_at = fleet.wait_stable(30 + 3 * heartbeat_s, what, settle_s, leaving)
            leave = analyse_leave(fleet, leaving, close_at, stable_at, classic, before)
            if isinstance(leave, str):
                result.problems.append(f"leave {number + 1}: {leave}")
                continue
            result.leaves.append(leave)
            problem = check_described(odradek, group, fleet, classic)
            if problem:
                result.problems.append(f"leave {number + 1}: {problem}")
    except Exception as error:
        result.error = str(error)
    finally:
        fleet.stop()
    return result


def leave_time(fleet: Fleet, heartbeat_s: float) -> float:
    """The next moment farthest from every live member's next heartbeat.

    Members heartbeat every interval from when they joined (classic: all at the same
    moment here; KIP-848: each from its last reconciliation), so a leave at a random
    moment could come just before everyone's heartbeat and make the rejoin time, the
    yardstick of the goal, arbitrarily small. The largest gap between the members'
    heartbeat phases is found from their logs and the leave goes in its middle:
    half an interval before the next heartbeat when all beat together.
    """
    beats = []
    for member in fleet.live:
        log = member.client_log()
        if log.heartbeats_sent:
            beats.append(log.heartbeats_sent[-1])
    earliest = time.time() + 0.2  # the member must have the command before
    if not beats:
        return earliest
    phases = sorted(beat % heartbeat_s for beat in beats)
    gaps = [
        ((phases[(i + 1) % len(phases)] - phase) % heartbeat_s, phase)
        for i, phase in enumerate(phases)
    ]
    gap, start = max(gaps) if len(phases) > 1 else (heartbeat_s, phases[0])
    target = (start + gap / 2) % heartbeat_s
    return earliest + (target - earliest) % heartbeat_s


def analyse_initial(
    fleet: Fleet, start: float, stable_at: float, classic: bool
) -> tuple[Initial, str]:
    logs = [m.client_log() for m in fleet.members]
    if not classic:
        epoch, problem = final_epoch(logs)
        return Initial(stable_at - start, None, None, None, epoch), problem
    generation, answered, problem = final_generation(logs, start)
    first_joins = [first_at_or_after(log.joins_sent, start) for log in logs]
    first_join_s = None
    if all(t is not None for t in first_joins):
        first_join_s = max(t for t in first_joins if t is not None) - start
    join_held_s = sync_s = None
    if answered is not None:
        last_join = max(t for log in logs for t in log.joins_sent if t <= answered + ROUNDING_S)
        join_held_s = answered - last_join
        sync_s = stable_at - answered
    return Initial(stable_at - start, first_join_s, join_held_s, sync_s, generation), problem


def analyse_leave(
    fleet: Fleet, leaving: Member, close_at: float, stable_at: float, classic: bool, before: int
) -> Leave | str:
    leaver_log = leaving.client_log()
    if classic:
        left_at = first_at_or_after(leaver_log.leaves_sent, close_at)
    else:  # the leave is the leaver's last heartbeat (member epoch -1)
        after_close = [t for t in leaver_log.heartbeats_sent if t >= close_at - ROUNDING_S]
        left_at = after_close[-1] if after_close else None
    if left_at is None:
        return "the leaving member's log shows no LeaveGroup"
    # Classic (eager): every member revokes and rejoins. KIP-848: only the members whose
    # assignment changes take part; the others just heartbeat on.
    remaining = [m for m in fleet.live if classic or m.times("assign", left_at)]
    logs = [m.client_log() for m in remaining]
    rejoins = [
        first_at_or_after(log.joins_sent if classic else log.heartbeats_sent, left_at)
        for log in logs
    ]
    if not rejoins or any(t is None for t in rejoins):
        return "a remaining member's log shows no rejoin after the leave"
    rejoin_times = [max(0.0, t - left_at) for t in rejoins if t is not None]
    generation, join_done = None, None
    if classic:
        generation, answered, problem = final_generation(logs, left_at)
        if problem:
            return problem
        assert answered is not None
        join_done = answered - (left_at + max(rejoin_times))
    else:
        generation, problem = final_epoch([m.client_log() for m in fleet.live])
        if problem:
            return problem
    return Leave(
        members_before=before,
        latency_s=stable_at - left_at,
        rejoins_s=rejoin_times,
        join_done_s=join_done,
        generation=generation,
    )


@dataclass
class Commits:
    results: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def commit_run(odradek: Odradek, seconds: float, setting: Setting) -> Commits:
    spec = {
        "kind": "commit",
        "bootstrap": odradek.bootstrap,
        "topic": TOPIC,
        "rtt_topic": RTT_TOPIC,
        "partitions": PARTITIONS,
        "group": "bench-commits",
        "session_timeout_ms": setting.session_timeout_ms,
        "heartbeat_interval_ms": setting.heartbeat_interval_ms,
        "seconds": seconds,
        "warmup_s": min(0.5, seconds / 4),
        "broker_pid": odradek.pid,
    }
    progress("offset commits")
    try:
        process = subprocess.run(
            worker_command(spec), capture_output=True, timeout=120, cwd=REPO, check=False
        )
    except subprocess.TimeoutExpired:
        return Commits(error="commit worker timed out")
    lines = process.stdout.decode().strip().splitlines()
    if process.returncode or not lines:
        tail = process.stderr.decode(errors="replace")[-2000:]
        return Commits(error=f"commit worker exited {process.returncode}: {tail}")
    return Commits(results=json.loads(lines[-1]))


# -- report ------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.0f} ms"


def scenario_rows(scenario: Scenario, initial_delay_ms: int) -> tuple[list[str], int]:
    setting = scenario.setting
    classic = setting.protocol == "classic"
    if scenario.error and scenario.initial is None:
        return [f"| {setting.label} | error: {scenario.error} | | | | | | |"], 0
    rows, misses = [], 0
    initial = scenario.initial
    epoch = "generation" if classic else "member epoch"
    if initial is not None:
        detail = []
        if classic:
            delay_s = initial_delay_ms / 1000
            detail.append(f"minus the initial delay {ms(initial.stable_s - delay_s)}")
        if initial.first_join_s is not None:
            detail.append(f"every JoinGroup sent by +{ms(initial.first_join_s)}")
        if initial.join_held_s is not None:
            held = f"join phase held {ms(initial.join_held_s)}"
            if initial_delay_ms:
                held += f" ({initial.join_held_s * 1000 / initial_delay_ms:.2f}x the delay ¹)"
            detail.append(held)
        if initial.sync_s is not None:
            detail.append(f"then all assigned in {ms(initial.sync_s)}")
        generation = f", {epoch} {initial.generation}" if initial.generation else ""
        rows.append(
            f"| {setting.label} | {MEMBERS} subscribe → stable{generation} "
            f"| {ms(initial.stable_s)} | {'; '.join(detail) or '—'} | — | — | — | |"
        )
    for number, leave in enumerate(scenario.leaves, 1):
        detail = [f"median rejoin {ms(statistics.median(leave.rejoins_s))}"]
        if not classic:
            detail.insert(0, f"{len(leave.rejoins_s)} of {leave.members_before - 1} took part")
        after = leave.latency_s - leave.slowest_s
        if leave.join_done_s is not None:
            detail.append(f"join phase done {ms(leave.join_done_s)} after the last rejoin")
            detail.append(f"then all assigned in {ms(after - leave.join_done_s)}")
        else:
            detail.append(f"all assigned {ms(after)} after the last rejoin")
        generation = f", {epoch} {leave.generation}" if leave.generation else ""
        ok = leave.ratio <= REBALANCE_GOAL
        misses += not ok
        rows.append(
            f"| | leave {number}: {leave.members_before} → {leave.members_before - 1} members"
            f"{generation} | {ms(leave.latency_s)} | {'; '.join(detail)} "
            f"| {ms(leave.slowest_s)} | {leave.ratio:.2f}x | ≤ {REBALANCE_GOAL:g}x "
            f"| {verdict(ok)} |"
        )
    if scenario.error:
        rows.append(f"| | error: {scenario.error} | | | | | | |")
    return rows, misses


def group_table(scenarios: list[Scenario], initial_delay_ms: int) -> tuple[list[str], int]:
    lines = [
        "| settings | event | to stable | details | slowest rejoin "
        "| rebalance / slowest rejoin | goal | |",
        "|---|---|--:|---|--:|--:|--:|---|",
    ]
    misses = 0
    for scenario in scenarios:
        rows, missed = scenario_rows(scenario, initial_delay_ms)
        lines += rows
        misses += missed
    return lines, misses


def commit_table(commits: Commits, seconds: float) -> list[str]:
    if commits.error:
        return [f"Offset commits: error: {commits.error}"]
    results = commits.results
    produce = results["produce"]
    produce_rate = produce["count"] / produce["seconds"]
    lines = [
        f"One process, synchronous calls in a loop for {seconds:g} s each (after a short "
        "untimed warm-up); broker CPU in cores (100% = one core).",
        "",
        "| operation | per second | per call | broker CPU | / produce round trips |",
        "|---|--:|--:|--:|--:|",
    ]
    for key, label in (
        ("commit-1", "OffsetCommit, 1 partition"),
        (f"commit-{PARTITIONS}", f"OffsetCommit, {PARTITIONS} partitions"),
        ("produce", "Produce acks=all (idempotent), 1 record of 100 B + flush()"),
    ):
        run = results[key]
        rate = run["count"] / run["seconds"]
        shown = f"{rate:,.0f}"
        if key == f"commit-{PARTITIONS}":
            shown += f" ({rate * PARTITIONS:,.0f} offsets/s)"
        lines.append(
            f"| {label} | {shown} | {1000 / rate:.2f} ms | {run['broker_cpu']:.0%} "
            f"| {rate / produce_rate:.2f}x |"
        )
    return lines


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one setting, fewer leaves (~30 s)")
    parser.add_argument(
        "--initial-delay-ms",
        type=int,
        help="group.initial.rebalance.delay.ms (Kafka's default 3000; quick 1000)",
    )
    parser.add_argument("--leaves", type=int, help="members leaving in turn (3; quick 2)")
    parser.add_argument("--commit-seconds", type=float, help="per commit loop (3; quick 1.5)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (member logs)")
    parser.add_argument("--dir", type=Path, default=REPO / "var", help="parent of the work dir")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    initial_delay_ms = (
        args.initial_delay_ms if args.initial_delay_ms is not None else 1000 if args.quick else 3000
    )
    leaves = args.leaves if args.leaves is not None else 2 if args.quick else 3
    commit_seconds = args.commit_seconds or (1.5 if args.quick else 3.0)
    # librdkafka's defaults, and a short heartbeat that shows the broker's own share.
    fast = Setting(session_timeout_ms=6000, heartbeat_interval_ms=500)
    settings = [fast] if args.quick else [Setting(45000, 3000), fast]

    import confluent_kafka

    started = time.perf_counter()
    load_start = load_average()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-groups-", dir=args.dir))
    shown = workdir.relative_to(REPO) if workdir.is_relative_to(REPO) else workdir
    overrides = {
        "group.initial.rebalance.delay.ms": str(initial_delay_ms),
        "group.consumer.heartbeat.interval.ms": str(CONSUMER_HEARTBEAT_MS),
    }
    print(
        f"### groups: consumer-group rebalances and offset commits (`make bench`; "
        f"`.venv/bin/python bench/groups.py{' --quick' if args.quick else ''}`)\n\n"
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} CPUs, shared by the broker and the clients. odradek with "
        f"{', '.join(f'`{k}={v}`' for k, v in overrides.items())}, data in {shown}/. "
        f"{MEMBERS} confluent-kafka {confluent_kafka.__version__} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) consumers, each in its own process, subscribe "
        f"to one topic of {PARTITIONS} partitions: classic protocol, "
        f"`partition.assignment.strategy=range` (eager), "
        f"`max.poll.interval.ms={MAX_POLL_INTERVAL_MS}` (the rebalance timeout), "
        f"`session.timeout.ms` / `heartbeat.interval.ms` per row; then {leaves} of them "
        f"`close()` in turn (clean LeaveGroup). Rejoin = LeaveGroup sent → the member's "
        f"JoinGroup sent; rebalance = LeaveGroup sent → the last remaining member's "
        f"`on_assign` (times from the clients' callbacks and librdkafka debug logs). "
        f"Load average at start: {show_load(load_start)}.\n",
        flush=True,
    )
    warn_if_busy(load_start)
    errors: list[str] = []
    problems: list[str] = []
    misses = 0
    odradek: Odradek | None = None
    try:
        odradek = Odradek(workdir, overrides)
        odradek.create_topic(TOPIC, PARTITIONS)
        odradek.create_topic(RTT_TOPIC, 1)
        kip848 = CONSUMER_GROUP_HEARTBEAT_KEY in odradek.api_versions()
        scenarios = [
            run_scenario(odradek, setting, workdir, leaves, initial_delay_ms, MEMBERS)
            for setting in settings
        ]
        print(f"#### Classic protocol: {MEMBERS} members, {PARTITIONS} partitions\n", flush=True)
        lines, misses = group_table(scenarios, initial_delay_ms)
        footnote = (
            "¹ From the last JoinGroup sent to the first JoinGroup response. The initial "
            "delay restarts while new members keep arriving (up to the rebalance timeout), "
            "as Kafka's does: members that all join during the first delay wait a second one."
        )
        print("\n".join([*lines, "", footnote, ""]), flush=True)

        commits = commit_run(odradek, commit_seconds, fast)
        print("#### Offset commits\n", flush=True)
        print("\n".join([*commit_table(commits, commit_seconds), ""]), flush=True)
        if commits.error:
            errors.append(f"offset commits: {commits.error}")

        print("#### group.protocol=consumer (KIP-848)\n", flush=True)
        if kip848:
            setting = Setting(0, 0, protocol="consumer")
            scenario = run_scenario(odradek, setting, workdir, leaves, initial_delay_ms, MEMBERS)
            scenarios.append(scenario)
            lines, missed = group_table([scenario], 0)
            misses += missed
            print(
                "\n".join(
                    [
                        f"The same {MEMBERS} members and leaves with `group.protocol=consumer`:"
                        " server-side assignor (the broker's default), no initial delay, "
                        f"`group.consumer.heartbeat.interval.ms={CONSUMER_HEARTBEAT_MS}` on the "
                        "broker. Rejoin = the leave (member epoch -1 heartbeat) sent → the "
                        "member's next ConsumerGroupHeartbeat sent, for the members whose "
                        "assignment changed; stable = nothing moved for two heartbeat "
                        "intervals, every member at the same epoch.",
                        "",
                        *lines,
                        "",
                    ]
                ),
                flush=True,
            )
        else:
            print(
                "not available: the broker does not advertise ConsumerGroupHeartbeat (API key "
                f"{CONSUMER_GROUP_HEARTBEAT_KEY}) in ApiVersions.\n",
                flush=True,
            )
        for scenario in scenarios:
            if scenario.error:
                errors.append(f"{scenario.setting.label}: {scenario.error}")
            problems += [f"{scenario.setting.label}: {p}" for p in scenario.problems]
        if problems:
            print(
                "\n".join(["Checks that failed (broker bugs?):", *(f"- {p}" for p in problems)])
                + "\n",
                flush=True,
            )
    finally:
        if odradek is not None:
            odradek.stop()
        if args.keep:
            print(f"work dir kept: {shown}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return finish("groups", started, errors + problems, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main())
