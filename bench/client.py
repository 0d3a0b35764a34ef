"""Client benchmark: producer and consumer throughput of odradek's Python client.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/client.py [--quick]``
(``--help`` lists the knobs). ``--quick`` takes about 10 s, the full run under a minute.

What is measured, and how:

- Broker: ``python -m odradek serve`` on 127.0.0.1:0, data in a fresh
  ``var/bench-client-*/`` directory (deleted at the end). Every topic has 4 partitions,
  replication factor 1.
- Clients, each run in its own process (this script with ``--worker``), one after the
  other against that broker: odradek's blocking ``Producer`` / ``Consumer`` (the
  confluent-kafka-shaped faces) and its asyncio ``AIOKafkaProducer`` /
  ``AIOKafkaConsumer``; kafka-python's ``KafkaProducer`` / ``KafkaConsumer`` (the
  pure-Python peer); confluent-kafka's ``Producer`` / ``Consumer`` (librdkafka, the C
  peer).
- Producer: N records of 1 KiB (random bytes, no key) into a fresh topic, acks=1, no
  compression, linger 5 ms, batch size 64 KiB, idempotence off (the same settings for
  every client; printed below with each client's names for them). Time = first send to
  flush complete; the client is built and has the topic's metadata before the clock
  starts. No delivery callbacks; the parent checks the topic's end offsets add up to N.
- Consumer: the first N records of a topic written once, before the runs, by
  confluent-kafka (max(N, 50k) records, in runs of 64 records per partition so the
  partitions fill evenly), read from the beginning of the 4 partitions with ``assign``
  (no group, no commits), each client's fetch defaults. A consumer with no new record
  for 30 s fails. Time = ``assign`` to the N-th record in hand; the client has
  the topic's metadata before the clock starts.
- Rounds: the client order alternates between rounds (reversed every other round); the
  table shows the best round of each client and side (``--rounds``, 2 full, 1 quick).
  Ratios are from the same run. Goal: odradek >= 1.5x kafka-python and >= 0.3x
  confluent-kafka, producer and consumer.
- Round trips: the blocking faces run the asyncio core on a background thread.
  ``produce()`` does not wait for it (it encodes the record into its batch on the
  caller's thread), but every ``consume()`` call of the blocking ``Consumer`` is one
  round trip to that thread, and ``poll()`` one per up to 500 records (it returns
  them one at a time from a local buffer); the round trip's cost is measured on its
  own, and ``poll()`` one message at a time (the usual confluent-kafka loop) is timed
  for odradek and confluent-kafka over ``min(N, 20k)`` records, outside the goals.
- Profile: the odradek producer and consumer are run once more under py-spy (sampling,
  every thread, idle time excluded) and the busiest functions are listed.

Other processes share the 2 cores and skew all of this, so the load average is printed
at start and end, with a warning above 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from _client_workers import (  # noqa: E402
    PARTITIONS,
    POLLERS,
    SOURCE_TOPIC,
    VALUE_SIZE,
    worker_main,
)
from _support import OdradekBroker, finish, load_average, show_load, warn_if_busy  # noqa: E402

READY_TIMEOUT_S = 60.0
WORKER_TIMEOUT_S = 600.0
PROFILE_RECORDS = 50_000
GOAL_KAFKA_PYTHON = 1.5
GOAL_CONFLUENT = 0.3
CLIENTS = ("odradek", "odradek-aio", "kafka-python", "confluent-kafka")

SETTINGS = {
    "odradek": "`acks=1`, `linger.ms=5`, `batch.size=65536`, `compression.type=none`, "
    "`enable.idempotence=false`; consumer `enable.auto.commit=false`, no group, "
    "`consume(500, 1.0)`",
    "odradek-aio": "`acks=1`, `linger_ms=5`, `max_batch_size=65536`, "
    "`compression_type=None`, `enable_idempotence=False`; consumer `group_id=None`, "
    "`getmany(timeout_ms=1000, max_records=500)`",
    "kafka-python": "`acks=1`, `linger_ms=5`, `batch_size=65536`, `compression_type=None`, "
    "`enable_idempotence=False`; consumer `group_id=None`, `enable_auto_commit=False`, "
    "`poll(timeout_ms=1000, max_records=500)`",
    "confluent-kafka": "`acks=1`, `linger.ms=5`, `batch.size=65536`, "
    "`compression.type=none`, `enable.idempotence=false`; consumer `group.id` set but "
    "`assign` only, `enable.auto.commit=false`, `consume(500, 1.0)`",
}


# -- environment ---------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# -- the broker ------------------------------------------------------------------------------
class Odradek(OdradekBroker):
    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, ready_timeout_s=READY_TIMEOUT_S)

    def create_topic(
        self, topic: str, partitions: int = PARTITIONS, config: dict[str, str] | None = None
    ) -> None:
        super().create_topic(topic, partitions, config)

    def end_offsets(self, topic: str) -> int:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-check"})
        try:
            return sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)
            )
        finally:
            consumer.close()


def worker_command(spec: dict[str, Any]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]


def run_worker(spec: dict[str, Any], prefix: list[str] | None = None) -> dict[str, Any]:
    try:
        process = subprocess.run(
            [*(prefix or []), *worker_command(spec)],
            capture_output=True,
            timeout=WORKER_TIMEOUT_S,
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    # py-spy (the profile's prefix) writes its own lines to stdout too
    lines = [line for line in process.stdout.decode().splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        tail = process.stderr.decode(errors="replace")[-1500:]
        return {"error": f"exit {process.returncode}: {tail}"}
    return json.loads(lines[-1])


def fill_source(odradek: Odradek, count: int) -> None:
    odradek.create_topic(SOURCE_TOPIC)
    spec = {
        "kind": "produce",
        "client": "confluent-kafka",
        "bootstrap": odradek.bootstrap,
        "spread": True,
    }
    result = run_worker({**spec, "topic": SOURCE_TOPIC, "count": count})
    if "error" in result:
        raise RuntimeError(f"filling {SOURCE_TOPIC}: {result['error']}")
    written = odradek.end_offsets(SOURCE_TOPIC)
    if written != count:
        raise RuntimeError(f"{SOURCE_TOPIC} holds {written} records, not {count}")


# -- profile ------------------------------------------------------------------------------------
def collapse(raw: Path) -> tuple[Counter[str], Counter[str], int, int]:
    """Self and inclusive sample counts per function from py-spy's raw (collapsed) output,
    the total, and the samples of the client's background (event-loop) thread."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = background = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [shorten(f) for f in stack.split(";")]
        if not frames or any("importlib" in f or "payloads" in f for f in frames):
            continue  # imports and the test data: before the clock starts
        total += count
        background += count if any("threading.py:Thread._bootstrap" in f for f in frames) else 0
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return own, inclusive, total, background


def shorten(frame: str) -> str:
    """``func (path/to/file.py:12)`` → ``file.py:func``; odradek paths kept from the package."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    if "/odradek/" in path:
        path = "odradek/" + path.rsplit("/odradek/", 1)[1]
    else:
        path = Path(path).name
    return f"{path}:{name}"


def profile(odradek: Odradek, kind: str, topic: str, count: int, workdir: Path) -> list[str]:
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        return [f"py-spy not in the venv ({py_spy}); profile skipped (`make bench-tools`)."]
    raw = workdir / f"profile-{kind}.txt"
    spec = {
        "kind": kind,
        "client": "odradek",
        "bootstrap": odradek.bootstrap,
        "topic": topic,
        "count": count,
    }
    prefix = [str(py_spy), "record", "-o", str(raw), "--format", "raw", "-r", "500", "--"]
    progress(f"profiling the odradek {kind}r under py-spy")
    result = run_worker(spec, prefix)
    if "error" in result or not raw.exists():
        return [f"profile of the {kind}r failed: {result.get('error', 'no output')}"]
    own, inclusive, total, background = collapse(raw)
    if not total:
        return [f"profile of the {kind}r: no samples"]
    lines = [
        f"odradek {kind}r, {count:,} records ({count / result['seconds']:,.0f} rec/s under "
        f"py-spy), {total:,} samples of busy threads at 500 Hz (imports left out), "
        f"{background / total:.0%} of them in the background event-loop thread, "
        f"{1 - background / total:.0%} in the caller's thread:",
        "",
        "| function (self time) | share | | function (inclusive) | share |",
        "|---|--:|---|---|--:|",
    ]
    for (self_name, self_count), (incl_name, incl_count) in zip(
        own.most_common(12), top_inclusive(inclusive, total), strict=False
    ):
        lines.append(
            f"| `{self_name}` | {self_count / total:.1%} | "
            f"| `{incl_name}` | {incl_count / total:.1%} |"
        )
    return lines


def top_inclusive(inclusive: Counter[str], total: int) -> list[tuple[str, int]]:
    """The 12 largest inclusive functions, leaving out thread entry frames (~100%)."""
    skipped = ("threading.py", "base_events.py:run_forever", "<module>", "worker_main", "main")
    chosen = [
        (name, count)
        for name, count in inclusive.most_common(60)
        if not any(word in name for word in skipped) and count < total * 0.97
    ]
    return chosen[:12]


# -- round trips -------------------------------------------------------------------------------
def round_trips(
    odradek: Odradek,
    count: int,
    best: dict[tuple[str, str], float],
    call_us: dict[str, float],
    errors: list[str],
) -> list[str]:
    """What the blocking faces' background loop thread costs them, in sentences."""
    lines: list[str] = []
    handoff = run_worker({"kind": "handoff", "count": min(count, 20_000)})
    if "error" in handoff:
        errors.append(f"round trip: {handoff['error']}")
        return lines
    per_call = handoff["seconds"] / handoff["count"]
    blocking, aio = best.get(("odradek", "produce")), best.get(("odradek-aio", "produce"))
    text = (
        f"Round trip to the blocking faces' event-loop thread (`LoopThread.run`: "
        f"`run_coroutine_threadsafe` + `future.result()`, an empty coroutine, the loop idle "
        f"and woken through its self-pipe each time): {per_call * 1e6:.1f} µs alone "
        f"({1 / per_call:,.0f} calls/s). The blocking `Consumer` pays it once per "
        f"`consume()` call and once per up to 500 records `poll()` returns (they wait in a "
        f"local buffer); `produce()` does not wait for the loop."
    )
    if blocking and aio and "odradek" in call_us:
        text += (
            f" Per record (best rounds above) the blocking producer takes "
            f"{1e6 / blocking:.1f} µs and the asyncio face over the same core "
            f"{1e6 / aio:.1f} µs; the blocking `produce()` calls returned in "
            f"{call_us['odradek']:.1f} µs each on average (the record encoded into its batch "
            f"on the caller's thread), the rest of its time was `flush()`."
        )
    lines += [text, ""]
    polled: dict[str, float] = {}
    polls = min(count, 20_000)
    for client in POLLERS:
        progress(f"{client} poll() one message at a time")
        spec = {
            "kind": "poll",
            "client": client,
            "bootstrap": odradek.bootstrap,
            "topic": SOURCE_TOPIC,
            "count": polls,
        }
        result = run_worker(spec)
        if "error" in result:
            errors.append(f"{client} poll: {result['error']}")
        else:
            polled[client] = polls / result["seconds"]
    if len(polled) == len(POLLERS):
        ours, theirs = polled["odradek"], polled["confluent-kafka"]
        lines += [
            f"`poll()` one message per call (outside the goals), {polls:,} records: odradek "
            f"{ours:,.0f} msg/s, confluent-kafka {theirs:,.0f} msg/s ({ours / theirs:.2f}x); "
            f"odradek's `consume(500, 1.0)` above reads "
            f"{best.get(('odradek', 'consume'), 0):,.0f} msg/s.",
            "",
        ]
    return lines


# -- report ------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def rate(result: dict[str, Any] | None) -> float | None:
    if not result or "error" in result:
        return None
    return result["count"] / result["seconds"]


def show_rate(value: float | None) -> tuple[str, str]:
    if value is None:
        return "error", "error"
    return f"{value:,.0f}", f"{value * VALUE_SIZE / 1e6:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k records, 1 round")
    parser.add_argument("--records", type=int, help="records per run (100000; quick 20000)")
    parser.add_argument("--rounds", type=int, help="rounds (2; quick 1)")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profiles")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    parser.add_argument("--dir", type=Path, default=REPO / "var", help="parent of the work dir")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    count = args.records or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 2)

    import confluent_kafka
    import kafka

    started = time.perf_counter()
    load_start = load_average()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-client-", dir=args.dir))
    shown = workdir.relative_to(REPO) if workdir.is_relative_to(REPO) else workdir
    print(
        f"### client: producer and consumer throughput (`make bench`; "
        f"`.venv/bin/python bench/client.py{' --quick' if args.quick else ''}`)\n\n"
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} CPUs, shared by the broker and the client. One odradek broker "
        f"(data in {shown}/), topics of {PARTITIONS} partitions; {count:,} records of "
        f"{VALUE_SIZE} B values, no keys, per run; each client in its own process, "
        f"{rounds} round{'s' if rounds > 1 else ''} in alternating order, best round "
        f"shown. kafka-python {kafka.__version__}, confluent-kafka "
        f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}). "
        f"Load average at start: {show_load(load_start)}.\n\nSettings (the same for all "
        f"as far as each client has them):\n",
        flush=True,
    )
    for client in CLIENTS:
        print(f"- {client}: {SETTINGS[client]}", flush=True)
    print(
        "\nProducer: first send → flush complete. Consumer: `assign` from the beginning → "
        "the last record in hand (MB = 10^6 B of values).\n",
        flush=True,
    )
    warn_if_busy(load_start)
    errors: list[str] = []
    misses = 0
    best: dict[tuple[str, str], float] = {}
    call_us: dict[str, float] = {}
    odradek: Odradek | None = None
    try:
        odradek = Odradek(workdir)
        # the consumers read the first `count`; the profiled one reads PROFILE_RECORDS
        source_count = count if args.no_profile else max(count, PROFILE_RECORDS)
        progress(f"writing {source_count:,} records for the consumers")
        fill_source(odradek, source_count)
        for number in range(rounds):
            order = CLIENTS if number % 2 == 0 else tuple(reversed(CLIENTS))
            for client in order:
                topic = f"bench-client-{client}-{number}"
                odradek.create_topic(topic)
                base = {"client": client, "bootstrap": odradek.bootstrap, "count": count}
                progress(f"round {number + 1}: {client} producer")
                produced = run_worker({**base, "kind": "produce", "topic": topic})
                if "error" not in produced:
                    written = odradek.end_offsets(topic)
                    if written != count:
                        produced = {"error": f"topic holds {written} records, not {count}"}
                progress(f"round {number + 1}: {client} consumer")
                consumed = run_worker({**base, "kind": "consume", "topic": SOURCE_TOPIC})
                for side, result in (("produce", produced), ("consume", consumed)):
                    if "error" in result:
                        errors.append(f"{client} {side}, round {number + 1}: {result['error']}")
                    value = rate(result)
                    if value is not None and value > best.get((client, side), 0.0):
                        best[(client, side)] = value
                        if "call_seconds" in result:
                            call_us[client] = result["call_seconds"] / result["count"] * 1e6
        lines = [
            "| client | produce rec/s | MB/s | consume rec/s | MB/s |",
            "|---|--:|--:|--:|--:|",
        ]
        for client in CLIENTS:
            p_rec, p_mb = show_rate(best.get((client, "produce")))
            c_rec, c_mb = show_rate(best.get((client, "consume")))
            lines.append(f"| {client} | {p_rec} | {p_mb} | {c_rec} | {c_mb} |")
        for face in ("odradek", "odradek-aio"):
            for peer, goal in (
                ("kafka-python", GOAL_KAFKA_PYTHON),
                ("confluent-kafka", GOAL_CONFLUENT),
            ):
                cells = []
                for side in ("produce", "consume"):
                    ours, theirs = best.get((face, side)), best.get((peer, side))
                    if ours is None or theirs is None:
                        cells.append("—")
                        continue
                    ratio = ours / theirs
                    ok = ratio >= goal
                    if face == "odradek":  # the goal is judged on the blocking faces
                        misses += not ok
                    cells.append(f"{ratio:.2f}x (≥ {goal:g}x {verdict(ok)})")
                lines.append(f"| {face} / {peer} | {cells[0]} | | {cells[1]} | |")
        print("\n".join([*lines, ""]), flush=True)
        print(
            "The goals are judged on the blocking `Producer` / `Consumer` (the odradek "
            "rows); the odradek-aio ratios are shown for comparison.\n",
            flush=True,
        )

        print("\n".join(round_trips(odradek, count, best, call_us, errors)), flush=True)

        if not args.no_profile:
            print("#### Profile (py-spy)\n", flush=True)
            profile_count = PROFILE_RECORDS
            topic = "bench-client-profile"
            odradek.create_topic(topic)
            for kind, target in (("produce", topic), ("consume", SOURCE_TOPIC)):
                print("\n".join([*profile(odradek, kind, target, profile_count, workdir), ""]))
    finally:
        if odradek is not None:
            odradek.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return finish("client", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main())
