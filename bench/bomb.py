"""Compression-bomb benchmark: other clients' latency and the broker's memory under bombs.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/bomb.py [--quick]``.

What is measured, and how: one ``odradek serve`` with default settings and three
topics: ``plain`` (compression.type ``producer``: batches are stored as sent),
``to-zstd`` and ``to-gzip`` (the broker recompresses). A *victim* connection sends,
one request at a time, ApiVersions and then a one-record acks=1 produce to ``plain``,
and records each round trip. It does so for ``--seconds`` while nothing else happens
(the *quiet* phase), then for as long again while ``--attackers`` other connections
each send bombs back to back (the *bombs* phase): a gzip batch of 0.5 MiB expanding
to ``--bomb-mib`` MiB to ``to-zstd``, and a zstd one of ~17 KiB expanding as far to
``to-gzip``, alternately, each waiting for its answer. Printed per phase: p50, p99
and max of both victim latencies, the number of bombs answered and their error
codes, their median answer time, and the growth of the broker's peak RSS (VmHWM).
Comparing the two phases (and, by checking out an older commit, the code before the
bound) is the point; absolute numbers depend on the machine's load, printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from _support import (  # noqa: E402
    OdradekBroker,
    finish,
    load_average,
    show_load,
    warn_if_busy,
)

from odradek.records import batch as b  # noqa: E402
from odradek.records.codec import encode_batch, new_records  # noqa: E402
from tests.server.test_protocol import API_VERSIONS, produce_request, request  # noqa: E402
from tests.support.bombs import bomb, raw_batch  # noqa: E402
from tests.support.wire import WireClient  # noqa: E402

MiB = 1 << 20


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def produce_code(client: WireClient, topic: str, data: bytes, acks: int = 1) -> str:
    response = client.request(produce_request(topic, 0, data, acks=acks))
    code = response.responses[0].partition_responses[0].error_code
    return str(getattr(code, "name", code))


def victim(bootstrap: str, seconds: float) -> tuple[list[float], list[float], list[str]]:
    api, prod, errors = [], [], []
    versions = request(API_VERSIONS, 3, client_software_name="bench", client_software_version="1")
    with WireClient(bootstrap, timeout_s=120) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.perf_counter()
            client.request(versions)
            api.append(time.perf_counter() - start)
            data = encode_batch(new_records([b"victim"]))
            start = time.perf_counter()
            code = produce_code(client, "plain", data)
            prod.append(time.perf_counter() - start)
            if code != "none":
                errors.append(code)
            time.sleep(0.01)
    return api, prod, errors


def attacker(
    bootstrap: str, stop: threading.Event, bomb_mib: int, codes: Counter[str], took: list[float]
) -> None:
    kinds = [("to-zstd", b.GZIP), ("to-gzip", b.ZSTD)]
    payloads = {codec: bomb(codec, bomb_mib * MiB) for _, codec in kinds}
    with WireClient(bootstrap, timeout_s=300) as client:
        turn = 0
        while not stop.is_set():
            topic, codec = kinds[turn % 2]
            turn += 1
            data = raw_batch(payloads[codec], codec, timestamp=now_ms())
            start = time.perf_counter()
            try:
                codes[produce_code(client, topic, data)] += 1
            except (ConnectionError, OSError) as exc:
                codes[f"connection: {exc.__class__.__name__}"] += 1
                return
            took.append(time.perf_counter() - start)


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered) * 1000:7.1f} {p99 * 1000:8.1f} {ordered[-1] * 1000:8.1f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--bomb-mib", type=int, default=512, help="expanded size of a bomb")
    parser.add_argument("--attackers", type=int, default=2, help="connections sending bombs")
    args = parser.parse_args(argv)
    seconds = 4.0 if args.quick else args.seconds
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    errors: list[str] = []
    rows: list[tuple[str, str, str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bomb-") as tmp:
        broker = OdradekBroker(Path(tmp))
        try:
            broker.create_topic("plain", 1)
            broker.create_topic("to-zstd", 1, {"compression.type": "zstd"})
            broker.create_topic("to-gzip", 1, {"compression.type": "gzip"})
            base = vm_hwm(broker.pid)
            api, prod, failed = victim(broker.bootstrap, seconds)
            errors += [f"quiet victim produce: {code}" for code in failed]
            rows.append(("quiet", summary(api), summary(prod), "-", "-", "0"))

            stop = threading.Event()
            codes: Counter[str] = Counter()
            took: list[float] = []
            threads = [
                threading.Thread(
                    target=attacker,
                    args=(broker.bootstrap, stop, args.bomb_mib, codes, took),
                    daemon=True,
                )
                for _ in range(args.attackers)
            ]
            for thread in threads:
                thread.start()
            time.sleep(0.5)  # bombs in flight before the victim starts timing
            api, prod, failed = victim(broker.bootstrap, seconds)
            stop.set()
            for thread in threads:
                thread.join(600)
            errors += [f"victim produce during bombs: {code}" for code in failed]
            growth = (vm_hwm(broker.pid) - base) / MiB
            answered = ", ".join(f"{n} {code}" for code, n in sorted(codes.items()))
            bomb_time = f"{statistics.median(took) * 1000:.0f} ms" if took else "-"
            rows.append(
                ("bombs", summary(api), summary(prod), answered, bomb_time, f"{growth:.0f}")
            )
        finally:
            broker.stop()
    print(
        f"\nvictim round trips in ms (p50 p99 max); bombs of {args.bomb_mib} MiB on "
        f"{args.attackers} connections"
    )
    header = ("phase", "ApiVersions", "produce acks=1", "bombs answered", "bomb p50", "RSS+ MiB")
    widths = (6, 25, 25, 30, 9, 8)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return finish("bomb", started, errors, 0, False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
