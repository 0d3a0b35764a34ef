"""Embedded broker benchmark: time to a ready broker, and the cost of a topic per test.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/embedded.py [--quick]``.

What is measured, and how (odradek/testing, issue 15; goal: ready in under 1 s):

- *in-thread, cold*: a fresh interpreter that imports ``odradek.testing`` and starts
  ``EmbeddedBroker()``; the time from spawning it to its "ready" line, so interpreter
  start and every import the broker needs are in it — what the first test of a
  session that uses the plugin pays. kio imports all of Hypothesis when it can (to
  register strategies for its types), so the row is repeated with Hypothesis hidden,
  as where the dev extra is not installed (``serve`` hides it itself: cli/main.py).
- *in-thread, warm*: ``EmbeddedBroker()`` started and stopped again in this process,
  with odradek already imported — what each further broker of a session pays.
- *process*: ``EmbeddedBroker(process=True)`` from this process, spawn to ready line
  (interpreter start and imports again, in the child).
- *topic*: ``create_topic`` of a new, uniquely named 1-partition topic on a running
  broker (in-thread and process), until every partition has a leader; and again for a
  topic that exists (the idempotent path a session-scoped fixture takes).

Each row is the median (and min, max) of several runs; a broker is stopped by pid
(process) or joined (thread) after each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (
    REPO,
    finish,
    load_average,
    read_line,
    show_load,
    stop_process,
    warn_if_busy,
)

GOAL_READY_S = 1.0

COLD_SCRIPT = """
import sys
if sys.argv[1:] == ["no-hypothesis"]:
    sys.modules["hypothesis"] = None  # as where the dev extra is not installed
from odradek.testing import EmbeddedBroker
broker = EmbeddedBroker().start()
print("ready", broker.bootstrap, flush=True)
sys.stdin.readline()
broker.stop()
"""


def cold_thread_start(*args: str) -> float:
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", COLD_SCRIPT, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        line = read_line(child, "cold in-thread broker", lambda: "")
        elapsed = time.perf_counter() - began
        if not line.startswith("ready "):
            raise RuntimeError(f"cold in-thread broker said {line!r}")
        assert child.stdin is not None
        child.stdin.close()  # its readline returns: the broker stops, the child exits
        child.wait(20)
    finally:
        stop_process(child)
    return elapsed


def timed_start(process: bool) -> float:
    from odradek.testing import EmbeddedBroker

    began = time.perf_counter()
    broker = EmbeddedBroker(process=process).start()
    elapsed = time.perf_counter() - began
    broker.stop()
    return elapsed


def topic_costs(process: bool, count: int) -> tuple[list[float], list[float]]:
    """(seconds per new topic, seconds per existing topic) on one broker."""
    from odradek.testing import EmbeddedBroker

    new, existing = [], []
    with EmbeddedBroker(process=process) as broker:
        broker.create_topic("warm-up")  # the admin client's start is paid once, here
        for i in range(count):
            began = time.perf_counter()
            broker.create_topic(f"t-{i}")
            new.append(time.perf_counter() - began)
            began = time.perf_counter()
            broker.create_topic(f"t-{i}")
            existing.append(time.perf_counter() - began)
    return new, existing


def row(name: str, samples: list[float], goal_s: float | None = None) -> str:
    median = statistics.median(samples)
    verdict = ""
    if goal_s is not None:
        verdict = "  ok" if median < goal_s else f"  above the {goal_s:.0f} s goal"
    return (
        f"{name:34} {median * 1000:9.0f} {min(samples) * 1000:9.0f} "
        f"{max(samples) * 1000:9.0f} {len(samples):4d}{verdict}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    parser.add_argument("--verbose", action="store_true", help="accepted for bench/run.py")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else 7
    topics = 10 if args.quick else 40
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    print(f"{'':34} {'median ms':>9} {'min ms':>9} {'max ms':>9} {'runs':>4}")
    misses = 0
    errors: list[str] = []
    starts: list[tuple[str, Callable[[], float], bool]] = [
        ("ready: in-thread, cold process", cold_thread_start, False),
        ("ready: ... cold, no Hypothesis", lambda: cold_thread_start("no-hypothesis"), False),
        ("ready: in-thread, warm", lambda: timed_start(False), True),
        ("ready: process=True", lambda: timed_start(True), False),
    ]
    for name, start, warm_up in starts:
        try:
            if warm_up:
                start()  # imports odradek here first: the warm row excludes them
            samples = [start() for _ in range(runs)]
        except RuntimeError as error:
            errors.append(f"{name}: {error}")
            continue
        misses += statistics.median(samples) >= GOAL_READY_S
        print(row(name, samples, GOAL_READY_S), flush=True)
    for process in (False, True):
        mode = "process" if process else "in-thread"
        try:
            new, existing = topic_costs(process, topics)
        except (RuntimeError, ValueError, TimeoutError) as error:
            errors.append(f"topics ({mode}): {error}")
            continue
        print(row(f"topic: new, {mode}", new), flush=True)
        print(row(f"topic: existing, {mode}", existing), flush=True)
    return finish("embedded", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
