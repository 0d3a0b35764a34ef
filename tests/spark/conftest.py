"""Shared fixtures of the Spark connector tests: ONE local[2] SparkSession and ONE broker.

Spark takes seconds to start, so every test in tests/spark shares the session (with the
``odradek`` source registered) and the broker; tests only add their own topics (unique
names from ``topic_name``). Both are stopped at the end of the session — the broker by
pid, Spark through ``SparkSession.stop`` (which ends the JVM and its Python workers).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from odradek.client import AdminClient, NewTopic
from tests.support.broker import BrokerProcess, running_broker


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession with ``format("odradek")`` registered."""
    # Executors' Python workers must run this interpreter (the venv with odradek in it).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from odradek.spark import register

    work = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.local.dir", str(work / "local"))
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One odradek broker for all Spark tests (each test makes its own topics)."""
    with running_broker(tmp_path_factory.mktemp("spark-broker") / "data") as process:
        yield process


@pytest.fixture(scope="session")
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        yield client
    finally:
        client.close()


_names = itertools.count()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names per test: ``topic_name("in")`` → ``test_x-in-3``."""

    def make(suffix: str = "t") -> str:
        base = request.node.name.replace("[", "-").replace("]", "")[:60]
        return f"{base}-{suffix}-{next(_names)}"

    return make


@pytest.fixture
def create_topic(admin: AdminClient) -> Callable[..., str]:
    """``create_topic(name, partitions=1, config=None)`` creates and returns ``name``."""

    def make(name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
        futures[name].result(30)
        return name

    return make
