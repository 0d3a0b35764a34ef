"""Storage benchmark: Log appends and sequential reads against raw file I/O; offset lookups.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/storage.py [--quick]``
(``--help`` lists the knobs; ``--verbose`` prints every round).

What is measured, and how:

- Append: one prebuilt, valid, uncompressed v2 batch of exactly 16 KiB or 1 MiB (one
  record, current timestamp) is appended N times through ``Log.append_as_leader`` (one
  batch per call, as one produce request carries) to a fresh log with the default
  ``LogConfig``. The raw baseline ``os.write``s the same bytes in the same chunks to a
  plain file opened the same way (O_RDWR|O_CREAT), in the same directory. Neither side
  fsyncs: both measure writes into the page cache, which is also what Kafka
  acknowledges by default. The first append of each side is untimed (a fresh log
  fsyncs its leader-epoch checkpoint on its first append).
- Sequential read: ``Log.read(offset, max_bytes=1 MiB)`` from offset 0 to the log end,
  reading every returned range with ``os.preadv`` into one reused buffer; the baseline
  ``os.preadv``s the raw file in 1 MiB chunks into the same buffer. The data was just
  written, so both read the page cache (a consumer at the tail); each measurement makes
  ``READ_PASSES`` passes over the data.
- Optional (``--sendfile``): the same reads sent with ``os.sendfile`` into a socketpair
  drained by a thread. Both sides are bound by the socket copy, so this says little.
- Noise: raw and Log runs alternate (which goes first flips every round), each round
  starts from freshly deleted files, one untimed warm-up round precedes each batch
  size, and the median of the rounds is reported. A run writes 128 MiB, not more:
  the VM this was written on boots with free page reporting (memory freed in the
  guest goes back to the host, apparently once ~256 MiB of it is free, i.e. 32 blocks
  of 8 MiB) and touching such memory again is ~10x slower than a page-cache write,
  so with 256 MiB-1 GiB runs the same raw write varied from 0.2 to 1.2 s while
  128 MiB runs were stable. Before each timed write the same amount is written to a
  scratch file and deleted, so both sides allocate from recently freed memory.
  Other processes on the machine still skew the numbers (Python code more than the
  kernel's copy), so the load average is printed with the results.
- Offset lookup: logs of 1 thousand and 1 million 100-byte batches (default
  index.interval.bytes 4096; built with many batches per ``append_as_leader`` call to
  keep the build short), then random offsets are looked up with
  ``Log.read(offset, max_bytes=1)`` and with ``LogSegment.translate_offset``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.records.batch import parse_header
from odradek.records.codec import Record, encode_batch
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

REPO = Path(__file__).resolve().parent.parent
KIB = 1024
MIB = 1024 * 1024
FETCH_BYTES = MIB  # Kafka's max.partition.fetch.bytes default
READ_PASSES = 4
APPEND_GOALS = {MIB: 0.85, 16 * KIB: 0.5}  # Log/raw append throughput, at least
LOOKUP_GOAL = 2.0  # lookup cost in the big log / in the 1k-batch log, at most
SMALL_BATCH_BYTES = 100
# Below 512: each batch is two pwritev buffers and IOV_MAX is 1024.
BUILD_BATCHES_PER_APPEND = 500


# -- inputs and environment ---------------------------------------------------------
def make_batch(size: int) -> bytes:
    """One valid uncompressed v2 batch of exactly ``size`` bytes (one record, now)."""
    timestamp = time.time_ns() // 1_000_000
    value = os.urandom(size)
    value_len = size - 70
    for _ in range(10):
        batch = encode_batch([Record(0, timestamp, None, value[:value_len])])
        if len(batch) == size:
            parse_header(batch)
            return batch
        value_len += size - len(batch)
    raise RuntimeError(f"cannot build a batch of exactly {size} bytes")


def filesystem_of(path: Path) -> str:
    """``fstype on device (mount point)`` of the mount holding ``path`` (Linux)."""
    best, answer = "", "unknown filesystem"
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                device, mount_point, fstype = line.split()[:3]
                inside = str(path).startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, answer = mount_point, f"{fstype} on {device} ({mount_point})"
    except OSError:
        pass
    return answer


def human(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def load_average() -> str:
    """Other processes on the machine skew the numbers; the report says how busy it was."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# -- raw file baseline ------------------------------------------------------------------
def prefault(path: Path, total: int) -> None:
    """Write ``total`` bytes and delete them, so the next writer gets recently used pages."""
    chunk = bytes(MIB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(total // MIB):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(path)


def raw_write(path: Path, batch: bytes, count: int) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    write = os.write
    try:
        write(fd, batch)  # untimed, like the log's first append
        started = time.perf_counter()
        for _ in range(count):
            write(fd, batch)
        elapsed = time.perf_counter() - started
        assert os.fstat(fd).st_size == len(batch) * (count + 1), "short write"
    finally:
        os.close(fd)
    return elapsed


def raw_read(path: Path, buffer: memoryview) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    preadv, buffers = os.preadv, [buffer[:FETCH_BYTES]]
    total = 0
    try:
        started = time.perf_counter()
        for _ in range(READ_PASSES):
            position = 0
            while count := preadv(fd, buffers, position):
                position += count
            total += position
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return elapsed, total


# -- through the Log ------------------------------------------------------------------
def log_append(log: Log, batch: bytes, count: int) -> float:
    append = log.append_as_leader
    append(batch, leader_epoch=0)  # untimed: the first append writes the epoch checkpoint
    started = time.perf_counter()
    for _ in range(count):
        append(batch, leader_epoch=0)
    elapsed = time.perf_counter() - started
    assert log.log_end_offset == count + 1
    return elapsed


def log_read(log: Log, buffer: memoryview, batch_size: int) -> tuple[float, int]:
    """Fetch from offset 0 to the log end, reading the bytes of every returned range.

    Every batch holds one record, so the next fetch offset is the first batch's offset
    plus the number of whole batches returned (a consumer takes it from the last batch).
    """
    end = log.log_end_offset
    read, preadv = log.read, os.preadv
    total = 0
    started = time.perf_counter()
    for _ in range(READ_PASSES):
        offset = 0
        while offset < end:
            info = read(offset, FETCH_BYTES)
            for file_range in info.ranges:
                length = file_range.length
                total += preadv(file_range.fd, [buffer[:length]], file_range.position)
                offset = info.first_batch_offset + length // batch_size  # type: ignore[operator]
    elapsed = time.perf_counter() - started
    return elapsed, total


# -- sendfile (optional) ----------------------------------------------------------------
class Drain:
    """A socketpair whose reading end a thread empties; write to ``sender``."""

    def __init__(self) -> None:
        self.sender, self.receiver = socket.socketpair()
        self.received = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        buffer = bytearray(4 * MIB)
        recv_into = self.receiver.recv_into
        while count := recv_into(buffer):
            self.received += count

    def finish(self) -> int:
        self.sender.shutdown(socket.SHUT_WR)
        self.thread.join()
        self.sender.close()
        self.receiver.close()
        return self.received


def sendfile_all(out_fd: int, in_fd: int, position: int, length: int) -> None:
    end = position + length
    while position < end:
        position += os.sendfile(out_fd, in_fd, position, end - position)


def raw_sendfile(path: Path) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    drain = Drain()
    out = drain.sender.fileno()
    try:
        started = time.perf_counter()
        for position in range(0, size, FETCH_BYTES):
            sendfile_all(out, fd, position, min(FETCH_BYTES, size - position))
        received = drain.finish()
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return elapsed, received


def log_sendfile(log: Log, batch_size: int) -> tuple[float, int]:
    end = log.log_end_offset
    drain = Drain()
    out = drain.sender.fileno()
    offset = 0
    started = time.perf_counter()
    while offset < end:
        info = log.read(offset, FETCH_BYTES)
        for file_range in info.ranges:
            sendfile_all(out, file_range.fd, file_range.position, file_range.length)
            offset = info.first_batch_offset + file_range.length // batch_size  # type: ignore[operator]
    received = drain.finish()
    return time.perf_counter() - started, received


# -- throughput rounds --------------------------------------------------------------------
@dataclass
class Samples:
    """Seconds per round for the raw file and for the Log; ``size`` bytes each."""

    size: int
    raw: list[float] = field(default_factory=list)
    log: list[float] = field(default_factory=list)

    def medians(self) -> tuple[float, float]:
        return statistics.median(self.raw), statistics.median(self.log)


def throughput_rounds(
    workdir: Path, batch_size: int, total: int, rounds: int, sendfile: bool
) -> dict[str, Samples]:
    """Warm-up round, then ``rounds`` rounds of raw and Log runs in alternating order."""
    batch = make_batch(batch_size)
    count = total // batch_size - 1  # plus one untimed first batch
    total = (count + 1) * batch_size
    buffer = memoryview(bytearray(max(FETCH_BYTES, batch_size)))
    results = {
        "append": Samples(count * batch_size),
        "read": Samples(total * READ_PASSES),
        "sendfile": Samples(total),
    }
    scratch = workdir / "prefault.data"
    record = True

    def run_raw() -> None:
        path = workdir / "raw.data"
        prefault(scratch, total)
        try:
            append_s = raw_write(path, batch, count)
            read_s, size = raw_read(path, buffer)
            assert size == total * READ_PASSES
            sendfile_s, sent = raw_sendfile(path) if sendfile else (0.0, total)
            assert sent == total
        finally:
            path.unlink()
        if record:
            results["append"].raw.append(append_s)
            results["read"].raw.append(read_s)
            if sendfile:
                results["sendfile"].raw.append(sendfile_s)

    def run_log() -> None:
        directory = workdir / "bench-0"
        prefault(scratch, total)
        log, _ = open_log(directory, LogConfig())
        try:
            append_s = log_append(log, batch, count)
            read_s, size = log_read(log, buffer, batch_size)
            assert size == total * READ_PASSES, (size, total)
            sendfile_s, sent = log_sendfile(log, batch_size) if sendfile else (0.0, total)
            assert sent == total
        finally:
            log.delete_files()
            shutil.rmtree(directory)
        if record:
            results["append"].log.append(append_s)
            results["read"].log.append(read_s)
            if sendfile:
                results["sendfile"].log.append(sendfile_s)

    record = False
    run_raw()
    run_log()
    record = True
    for round_number in range(rounds):
        order: list[Callable[[], None]] = [run_raw, run_log]
        if round_number % 2:
            order.reverse()
        for run in order:
            run()
    return results


# -- offset lookup ----------------------------------------------------------------------
def build_small_log(directory: Path, batches: int) -> tuple[Log, float]:
    """A log of ``batches`` 100-byte batches, appended many batches per call."""
    batch = make_batch(SMALL_BATCH_BYTES)
    log, _ = open_log(directory, LogConfig())
    started = time.perf_counter()
    full, rest = divmod(batches, BUILD_BATCHES_PER_APPEND)
    chunk = batch * BUILD_BATCHES_PER_APPEND
    for _ in range(full):
        log.append_as_leader(chunk, leader_epoch=0)
    if rest:
        log.append_as_leader(batch * rest, leader_epoch=0)
    assert log.log_end_offset == batches
    return log, time.perf_counter() - started


def lookup_rounds(log: Log, lookups: int, rounds: int) -> tuple[float, float]:
    """Median µs per random lookup: (Log.read(o, max_bytes=1), translate_offset(o))."""
    rng = random.Random(42)
    offsets = [rng.randrange(log.log_end_offset) for _ in range(lookups)]
    pairs = [(log.segment_for(offset), offset) for offset in offsets]
    read_times, translate_times = [], []
    read = log.read
    for _ in range(rounds):
        started = time.perf_counter()
        for offset in offsets:
            read(offset, 1)
        read_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        for segment, offset in pairs:
            segment.translate_offset(offset)  # type: ignore[union-attr]
        translate_times.append(time.perf_counter() - started)
    scale = 1e6 / lookups
    return statistics.median(read_times) * scale, statistics.median(translate_times) * scale


def lookup_case(
    workdir: Path, batches: int, lookups: int, rounds: int
) -> tuple[float, float, float]:
    directory = workdir / f"lookup-{batches}"
    progress(f"offset lookups in a log of {batches:,} batches")
    log, build_s = build_small_log(directory, batches)
    try:
        read_us, translate_us = lookup_rounds(log, lookups, rounds)
    finally:
        log.delete_files()
        shutil.rmtree(directory)
    return read_us, translate_us, build_s


# -- report ---------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def throughput_table(
    workdir: Path, total: int, rounds: int, sendfile: bool, verbose: bool
) -> tuple[list[str], list[str], int]:
    lines = [
        "| workload | batch | raw MB/s | Log MB/s | Log/raw | goal | |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    notes, misses = [], 0
    labels = {
        "append": "append, 1 batch per call",
        "read": "sequential read, 1 MiB fetches",
        "sendfile": "sendfile, 1 MiB fetches",
    }
    for batch_size in (MIB, 16 * KIB):
        progress(f"{human(batch_size)} batches: warm-up + {rounds} rounds of raw and Log")
        results = throughput_rounds(workdir, batch_size, total, rounds, sendfile)
        for name, samples in results.items():
            if not samples.raw:
                continue
            if verbose:
                progress(
                    f"{name} {human(batch_size)} seconds: raw "
                    f"{' '.join(f'{x:.4f}' for x in samples.raw)} | Log "
                    f"{' '.join(f'{x:.4f}' for x in samples.log)}"
                )
            raw_s, log_s = samples.medians()
            ratio = raw_s / log_s
            goal = APPEND_GOALS[batch_size] if name == "append" else None
            mark = "" if goal is None else verdict(ratio >= goal)
            misses += goal is not None and ratio < goal
            lines.append(
                f"| {labels[name]} | {human(batch_size)} | {samples.size / raw_s / 1e6:,.0f} "
                f"| {samples.size / log_s / 1e6:,.0f} | {ratio:.2f}x "
                f"| {'—' if goal is None else f'≥ {goal:.2f}x'} | {mark} |"
            )
            if name == "append":
                batches = samples.size // batch_size
                notes.append(
                    f"append {human(batch_size)}: raw {raw_s / batches * 1e6:.1f} µs/batch, "
                    f"Log {log_s / batches * 1e6:.1f} µs/batch "
                    f"(Log overhead {(log_s - raw_s) / batches * 1e6:.1f} µs/batch)"
                )
    return lines, notes, misses


def lookup_table(workdir: Path, big: int, lookups: int, rounds: int) -> tuple[list[str], int]:
    small_read, small_translate, _ = lookup_case(workdir, 1_000, lookups, rounds)
    big_read, big_translate, build_s = lookup_case(workdir, big, lookups, rounds)
    lines = [
        f"| random offset lookup | 1k batches | {big // 1000:,}k batches | ratio | goal | |",
        "|---|--:|--:|--:|--:|---|",
    ]
    misses = 0
    for label, small_us, big_us in (
        ("`Log.read(offset, max_bytes=1)`", small_read, big_read),
        ("`LogSegment.translate_offset`", small_translate, big_translate),
    ):
        ratio = big_us / small_us
        misses += ratio > LOOKUP_GOAL
        lines.append(
            f"| {label} | {small_us:.1f} µs | {big_us:.1f} µs | {ratio:.2f}x "
            f"| ≤ {LOOKUP_GOAL:.0f}x | {verdict(ratio <= LOOKUP_GOAL)} |"
        )
    lines += [
        "",
        f"{lookups:,} random offsets per round, median of {rounds} rounds; "
        f"{SMALL_BATCH_BYTES}-byte batches, index.interval.bytes 4096. Building the "
        f"{big:,}-batch log took {build_s:.1f} s ({BUILD_BATCHES_PER_APPEND} batches per "
        f"append call, {build_s / big * 1e6:.1f} µs/batch).",
    ]
    return lines, misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller, faster run")
    parser.add_argument("--rounds", type=int, help="rounds per measurement (9; quick 3)")
    parser.add_argument("--total-mib", type=int, help="MiB written per run (128; quick 64)")
    parser.add_argument("--sendfile", action="store_true", help="also measure os.sendfile")
    parser.add_argument("--skip-lookup", action="store_true", help="skip the offset lookups")
    parser.add_argument("--verbose", action="store_true", help="print every round's numbers")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    parser.add_argument("--dir", type=Path, default=REPO / "var", help="parent of the temp dir")
    args = parser.parse_args(argv)
    total = (args.total_mib or (64 if args.quick else 128)) * MIB
    rounds = args.rounds or (3 if args.quick else 9)
    big_log = 100_000 if args.quick else 1_000_000
    lookups = 5_000 if args.quick else 20_000

    started = time.perf_counter()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir))
    shown = workdir.relative_to(REPO) if workdir.is_relative_to(REPO) else workdir
    print(
        f"### storage: Log vs raw file (`make bench`; "
        f"`.venv/bin/python bench/storage.py{' --quick' if args.quick else ''}`)\n\n"
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} CPUs; all files in {shown}/, {filesystem_of(workdir)}. "
        f"Page cache only, no fsync on either side. Each run writes {human(total)}; "
        f"reads make {READ_PASSES} passes over it; median of {rounds} rounds, raw and Log "
        f"alternating. MB = 10^6 bytes. Load average at start: {load_average()}.\n",
        flush=True,
    )
    misses = 0
    try:
        lines, notes, missed = throughput_table(workdir, total, rounds, args.sendfile, args.verbose)
        misses += missed
        print("\n".join([*lines, "", *notes, ""]), flush=True)
        if not args.skip_lookup:
            lines, missed = lookup_table(workdir, big_log, lookups, 3)
            misses += missed
            print("\n".join([*lines, ""]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"storage bench wall time: {time.perf_counter() - started:.1f} s; "
        f"load average at end: {load_average()}",
        flush=True,
    )
    return 1 if args.strict and misses else 0


if __name__ == "__main__":
    sys.exit(main())
