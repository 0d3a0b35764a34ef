"""Spark's Python workers and the interpreter they run.

Spark starts its workers with ``PYSPARK_PYTHON`` or, unset, the first ``python3`` on the
``PATH`` — not the virtualenv of a program run as ``.venv/bin/python job.py``. This test
runs such a program (its own Spark driver, in a subprocess) with ``python3`` on the PATH
being the base interpreter the venv was made from, which has none of odradek's
dependencies: before ``register(spark)`` a read fails with one line that names
``PYSPARK_PYTHON``; after it, the same read works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.client import Producer
from tests.support.broker import BrokerProcess

PROGRAM = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    bootstrap, topic = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")

    def count():
        return (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load().count())

    try:
        print("BEFORE", count())
    except Exception as error:
        print("BEFORE-ERROR", str(error).splitlines()[0])
    from odradek.spark import register

    register(spark)
    print("AFTER", count())
    spark.stop()
    """
)


def _bare_python() -> Path | None:
    """The interpreter this venv was made from, if it cannot import odradek's deps."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists() or Path(sys.prefix) == Path(sys.base_prefix):
        return None
    env = {"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    probe = subprocess.run([str(base), "-c", "import kio"], env=env, capture_output=True)
    return None if probe.returncode == 0 else base


@pytest.mark.slow
def test_register_points_workers_at_the_drivers_python(
    broker: BrokerProcess,
    create_topic: Callable[..., str],
    topic_name: Callable[..., str],
    tmp_path: Path,
) -> None:
    bare = _bare_python()
    if bare is None:
        pytest.skip("no base interpreter without odradek's dependencies to play the wrong python3")
    topic = create_topic(topic_name())
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(7):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    producer.close()

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(bare)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONNOUSERSITE"] = "1"
    # The checkout on the workers' path (as when a job runs from it): the wrong python3
    # then finds odradek's source but not its dependencies, so odradek's own check speaks.
    # (Installed elsewhere, that python3 would not find the source at all, and Spark
    # says DATA_SOURCE_NOT_FOUND before any odradek code runs.)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "job.py"
    script.write_text(PROGRAM)
    done = subprocess.run(
        [sys.executable, str(script), broker.bootstrap, topic],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("BEFORE", "AFTER"))]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    before, after = lines
    assert before.startswith("BEFORE-ERROR") and "set PYSPARK_PYTHON" in before, before
    assert "Traceback" not in before
    assert after == "AFTER 7"
