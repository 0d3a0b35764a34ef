"""Log cleaner benchmark: how fast a clean goes, and what it costs the event loop.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/cleaner.py [--quick]``.

What is measured, and how:

- Clean rate: a compacted log of ``--mib`` MiB (1 KiB segments' worth of 100-record
  batches of ~200-byte records over ``--keys`` distinct keys, 64 MiB segments) is
  cleaned once with ``clean_log_now`` (map, rewrite, swap: what a cleaner thread does),
  beside a plain scan that reads and decodes the same batches (``read_batches`` +
  ``decode_batches``), the part no cleaner can avoid. Printed: MiB/s of each and the
  ratio clean / scan (1.0 = cleaning costs no more than reading the records once).
- Loop impact: an asyncio loop appends one 1 KiB batch every millisecond to another
  log and records how late each tick runs (loop lag), first alone, then while a
  thread cleans a fresh copy of the big log — as the broker's cleaner thread does
  beside its event loop. Printed: p50/p99 lag of both and the p99 ratio. The GIL is
  the cost here: each time the loop wakes it waits for the cleaner thread to drop
  the GIL, up to the interpreter's switch interval. ``odradek serve`` sets it to
  0.5 ms (5 ms by default); this bench measures both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from odradek.cli.serve import SWITCH_INTERVAL_S
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.storage.cleaner.clean import clean_log_now
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

MIB = 1024 * 1024
DEFAULT_SWITCH_S = 0.005  # CPython's default sys.getswitchinterval()
CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=64 * MIB)


def build(path: Path, total: int, keys: int) -> Log:
    log, _ = open_log(path, CONFIG)
    value = os.urandom(200)
    number = 0
    now = time.time_ns() // 1_000_000
    while log.size < total:
        records = [Record(i, now, b"key-%d" % ((number + i) % keys), value) for i in range(100)]
        log.append_as_leader(encode_batch(records), 0)
        number += 100
    log.roll()
    log.high_watermark = log.log_end_offset
    return log


def scan(log: Log) -> int:
    records = 0
    for data in log.read_batches(0):
        for batch in decode_batches(data):
            records += len(batch.records)
    return records


async def loop_lag(duration_s: float, path: Path) -> list[float]:
    """Ticks every ms appending a 1 KiB batch; returns each tick's lateness (ms)."""
    log, _ = open_log(path, LogConfig())
    batch = encode_batch([Record(0, time.time_ns() // 1_000_000, b"k", os.urandom(1000))])
    lags = []
    loop = asyncio.get_running_loop()
    end = loop.time() + duration_s
    while loop.time() < end:
        due = loop.time() + 0.001
        await asyncio.sleep(0.001)
        lags.append(max(0.0, loop.time() - due) * 1000)  # this tick's own lateness
        log.append_as_leader(batch, 0)
    log.close()
    return lags


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller, faster run")
    parser.add_argument("--mib", type=int, help="size of the log to clean (256; quick 64)")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    args = parser.parse_args(argv)
    total = (args.mib or (64 if args.quick else 256)) * MIB
    work = Path(tempfile.mkdtemp(prefix="odradek-bench-cleaner-"))
    try:
        log = build(work / "t-0", total, args.keys)
        size = log.size
        started = time.perf_counter()
        records = scan(log)
        scan_s = time.perf_counter() - started
        started = time.perf_counter()
        clean_log_now(log)
        clean_s = time.perf_counter() - started
        left = log.size
        log.close()

        alone = asyncio.run(loop_lag(3.0, work / "lag-a"))
        beside = {}
        for interval in (DEFAULT_SWITCH_S, SWITCH_INTERVAL_S):
            copy = build(work / f"u-{interval}", total, args.keys)
            thread = threading.Thread(target=clean_log_now, args=(copy,))
            sys.setswitchinterval(interval)
            thread.start()
            beside[interval] = asyncio.run(loop_lag(min(3.0, clean_s), work / f"lag-{interval}"))
            thread.join()
            sys.setswitchinterval(DEFAULT_SWITCH_S)
            copy.close()
        load = os.getloadavg()[0]
        print(
            f"cleaner: {size / MIB:.0f} MiB, {records:,} records over {args.keys:,} keys "
            f"-> {left / MIB:.2f} MiB after one clean (load {load:.1f})"
        )
        scan_rate, clean_rate = size / MIB / scan_s, size / MIB / clean_s
        print(f"  read+decode scan: {scan_rate:7.1f} MiB/s")
        print(
            f"  clean:            {clean_rate:7.1f} MiB/s   ratio clean/scan time "
            f"{clean_s / scan_s:.2f}x"
        )
        print(
            f"  loop lag alone:   p50 {statistics.median(alone):.2f} ms  "
            f"p99 {pct(alone, 0.99):.2f} ms  ({len(alone)} ticks)"
        )
        for interval, lags in beside.items():
            ratio = pct(lags, 0.99) / max(pct(alone, 0.99), 0.001)
            print(
                f"  lag beside clean, switch interval {interval * 1000:g} ms: "
                f"p50 {statistics.median(lags):.2f} ms  p99 {pct(lags, 0.99):.2f} ms  "
                f"({len(lags)} ticks)  p99 ratio {ratio:.1f}x"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
