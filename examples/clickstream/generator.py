"""Click-event generator: JSON ``{"user", "page", "ts"}`` records to the topic ``clicks``.

Run: ``python examples/clickstream/generator.py --bootstrap-servers HOST:PORT [--count N]
[--rate R] [--event-step-ms MS]``. Uses odradek's own Python client (the blocking,
confluent-kafka-shaped ``Producer``), keyed by user so a user's clicks stay in order.

Event time: event ``i`` carries ``ts = start + i * event-step-ms``. By default the step is
``1000 / rate`` ms, i.e. event time follows the wall clock; a larger step compresses
time (``--rate 500 --event-step-ms 120`` makes one minute of event time per second), so
that a demo sees its one-minute windows close in seconds. Pages are drawn with
Zipf-like weights (page ``k`` has weight ``1/k``), so the top pages are stable and a
seeded run is reproducible.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

PAGES = (
    "/",
    "/products",
    "/search",
    "/cart",
    "/products/lamp",
    "/products/chair",
    "/checkout",
    "/account",
    "/products/desk",
    "/help",
    "/blog",
    "/products/shelf",
    "/about",
    "/careers",
    "/legal",
)
PROGRESS_EVERY_S = 2.0
DELIVERY_TIMEOUT_S = 60.0


def iso_ms(epoch_ms: int) -> str:
    """``2026-01-02T03:04:05.678Z``: what Spark's ``from_json`` parses into a timestamp."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def click_events(
    count: int,
    *,
    start_ms: int,
    step_ms: float,
    users: int = 50,
    pages: int = len(PAGES),
    seed: int = 7,
) -> Iterator[dict[str, str]]:
    """``count`` click events, deterministic for a seed."""
    if not 1 <= pages <= len(PAGES):
        raise ValueError(f"pages must be between 1 and {len(PAGES)}, got {pages}")
    rng = random.Random(seed)
    names = PAGES[:pages]
    weights = [1 / rank for rank in range(1, pages + 1)]
    for i in range(count):
        yield {
            "user": f"user-{rng.randrange(users):03d}",
            "page": rng.choices(names, weights)[0],
            "ts": iso_ms(start_ms + int(i * step_ms)),
        }


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` unless it exists."""
    from odradek.client import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        futures = admin.create_topics([NewTopic(topic, partitions, 1)])
        try:
            futures[topic].result(30)
        except Exception as error:
            if "already exists" not in str(error).lower() and "topic_already" not in str(error):
                raise
    finally:
        admin.close()


def produce(
    bootstrap: str,
    topic: str,
    events: Iterator[dict[str, str]],
    *,
    rate: float = 0.0,
    progress: bool = True,
) -> int:
    """Send ``events`` (paced to ``rate`` per second when > 0); the number acknowledged."""
    from odradek.client import Producer

    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    sent = 0
    started = last_report = time.monotonic()
    try:
        for event in events:
            producer.produce(
                topic,
                json.dumps(event, separators=(",", ":")),
                event["user"],
                on_delivery=delivered,
            )
            sent += 1
            if rate > 0:
                ahead = started + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)  # pacing only: the rate is the point, not correctness
            now = time.monotonic()
            if progress and now - last_report >= PROGRESS_EVERY_S:
                last_report = now
                producer.poll(0)
                print(f"generator: {sent} clicks sent (event time {event['ts']})", flush=True)
        left = producer.flush(DELIVERY_TIMEOUT_S)
    finally:
        producer.close(5)
    if failures or left:
        raise RuntimeError(
            f"generator: {len(failures) + left} of {sent} clicks not delivered"
            + (f"; first error: {failures[0]}" if failures else "")
        )
    if progress:
        elapsed = time.monotonic() - started
        print(f"generator: {sent} clicks delivered to {topic} in {elapsed:.1f} s", flush=True)
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True, help="HOST:PORT of a broker")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--partitions", type=int, default=2, help="when creating the topic")
    parser.add_argument("--count", type=int, default=10_000, help="clicks to send")
    parser.add_argument("--rate", type=float, default=500.0, help="clicks/s; 0: unpaced")
    parser.add_argument(
        "--event-step-ms",
        type=float,
        default=None,
        help="event-time gap between clicks (default 1000/rate: real time)",
    )
    parser.add_argument("--start", default=None, help="ISO time of the first click (now)")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--pages", type=int, default=len(PAGES))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.count < 0 or args.rate < 0 or args.users < 1:
        parser.error("--count and --rate must be >= 0, --users >= 1")
    step = args.event_step_ms
    if step is None:
        step = 1000 / args.rate if args.rate > 0 else 100.0
    if args.start:
        try:
            start = datetime.datetime.fromisoformat(args.start.replace("Z", "+00:00"))
        except ValueError:
            parser.error(f"--start: not an ISO time: {args.start!r}")
        if start.tzinfo is None:
            start = start.replace(tzinfo=datetime.UTC)
        start_ms = int(start.timestamp() * 1000)
    else:
        start_ms = int(time.time() * 1000)
    try:
        events = click_events(
            args.count,
            start_ms=start_ms,
            step_ms=step,
            users=args.users,
            pages=args.pages,
            seed=args.seed,
        )
        ensure_topic(args.bootstrap_servers, args.topic, args.partitions)
        produce(args.bootstrap_servers, args.topic, events, rate=args.rate)
    except Exception as error:
        print(f"generator: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
