"""Run every benchmark script in bench/ (``make bench``) and print their output.

A bench script is any ``bench/*.py`` except this file and names starting with ``_``;
each runs in its own interpreter (this one), in name order, with the arguments given
here passed on (e.g. ``bench/run.py --quick``). Exits non-zero if any script failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def bench_scripts() -> list[Path]:
    return sorted(
        path
        for path in BENCH_DIR.glob("*.py")
        if path.name != Path(__file__).name and not path.name.startswith("_")
    )


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    failed = []
    for script in bench_scripts():
        print(f"==> {script.relative_to(BENCH_DIR.parent)} {' '.join(argv)}".rstrip(), flush=True)
        result = subprocess.run([sys.executable, str(script), *argv], check=False)
        if result.returncode:
            failed.append(f"{script.name} (exit {result.returncode})")
        print(flush=True)
    print(f"bench total: {time.perf_counter() - started:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
