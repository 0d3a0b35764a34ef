"""``make serve`` installs only odradek's runtime dependencies (``pip install -e .``): the
broker and the command-line tools must run without the ``dev`` and ``spark`` extras.

The processes here run with a ``sitecustomize`` that refuses to import any package of
those extras (Spark, Arrow, pandas, numpy, the test clients, pytest), so an import of
one on the serve or CLI path fails the test here instead of on a user's first
``make serve``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.broker import BrokerProcess

EXTRAS = (
    "pyspark pyarrow pandas numpy confluent_kafka aiokafka kafka pytest hypothesis moto "
    "lz4 snappy zstandard ruff mypy starlette jinja2 multipart uvicorn selenium httpx2"
)

BLOCKER = f"""
import sys

_BLOCKED = frozenset({EXTRAS!r}.split())


class _RefuseExtras:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ImportError(f"{{name}} is not installed by `make serve` (test blocker)")
        return None


sys.meta_path.insert(0, _RefuseExtras())
"""


def _env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def _odradek(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_broker_and_tools_run_without_the_extras(tmp_path: Path) -> None:
    env = _env(tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", "import numpy"], env=env, capture_output=True, text=True
    )
    assert "not installed by `make serve`" in probe.stderr  # the blocker is in place

    broker = BrokerProcess(tmp_path / "data")
    real_environ = os.environ.copy()
    os.environ.update(env)  # BrokerProcess's child inherits the blocker
    try:
        broker.launch()
    finally:
        os.environ.clear()
        os.environ.update(real_environ)
    try:
        broker.wait_ready()
        b = ["-b", broker.bootstrap]
        created = _odradek(env, "topics", "create", "t", "--partitions", "2", *b)
        assert created.returncode == 0, created.stderr
        sent = _odradek(env, "produce", "t", "--key-separator", ":", *b, stdin="k:v1\nk:v2\n")
        assert sent.returncode == 0, sent.stderr
        read = _odradek(
            env, "consume", "t", "--from-beginning", "--max-messages", "2", "--print-key", *b
        )
        assert read.returncode == 0, read.stderr
        assert read.stdout.splitlines() == ["k\tv1", "k\tv2"]
        described = _odradek(env, "topics", "describe", "t", *b)
        assert described.returncode == 0 and "PartitionCount: 2" in described.stdout
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
    assert "not installed by `make serve`" not in broker.log()
