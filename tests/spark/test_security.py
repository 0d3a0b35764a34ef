"""The connector over a secured cluster: Spark's ``kafka.security.protocol``,
``kafka.ssl.*`` and ``kafka.sasl.*`` options reach odradek's client, in the driver's
offset queries, the writer's producers and the readers' raw fetch sockets alike.

One broker with a SASL_SSL listener (SCRAM users from ``storage format --add-scram``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import USERS, format_with_scram
from tests.support.broker import BrokerProcess
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("spark-certs"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[BrokerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("spark-sasl-ssl") / "data"
    format_with_scram(data_dir)
    properties = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.keystore_pem),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    process = BrokerProcess(data_dir, [f"--override={k}={v}" for k, v in properties.items()])
    process.start(listen=None)
    try:
        yield process
    finally:
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def options(broker: BrokerProcess, certs: Certs, password: str = USERS["alice"]) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.urls["SASL_SSL"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.ca.location": str(certs.ca),
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "alice",
        "kafka.sasl.password": password,
    }


def test_write_then_read_over_sasl_ssl(spark: Any, secured: BrokerProcess, certs: Certs) -> None:
    topic = "secured-spark"
    rows = [(f"k{i}", f"v{i}") for i in range(200)]
    frame = spark.createDataFrame(rows, "key string, value string")
    frame.write.format("odradek").mode("append").options(**options(secured, certs)).option(
        "topic", topic
    ).save()
    read = (
        spark.read.format("odradek")
        .options(**options(secured, certs))
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .collect()
    )
    assert sorted(r.value for r in read) == sorted(v for _, v in rows)


def test_a_wrong_password_fails_the_query(spark: Any, secured: BrokerProcess, certs: Certs) -> None:
    reader = spark.read.format("odradek").options(**options(secured, certs, "wrong"))
    with pytest.raises(Exception, match=r"(?i)authentication failed"):
        reader.option("subscribe", "secured-spark").load().collect()
