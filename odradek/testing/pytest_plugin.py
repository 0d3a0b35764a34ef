"""pytest plugin: a real odradek broker for a test session (``pytest11`` entry point).

How this works and why: installing odradek registers this module with pytest, so any
project's tests can ask for

- ``odradek_broker`` (session): an ``EmbeddedBroker`` (embedded.py), started the first
  time a test asks for it and stopped when the session ends; its data dir under
  pytest's ``tmp_path_factory`` (pytest keeps the last few runs' dirs, logs included);
- ``odradek_bootstrap`` (session): its ``"127.0.0.1:PORT"``, for any Kafka client;
- ``odradek_topic``: a new, uniquely named one-partition topic per test, which is how
  tests sharing one broker keep out of each other's way;
- ``odradek_topic_factory``: ``make(partitions=1, config=None, suffix="t")`` for tests
  that need more than one topic, or other partition counts or configs.

Nothing is imported or started unless a test asks for one of these fixtures: the
plugin is loaded into every pytest session of an environment odradek is installed in,
and must cost those nothing. ``--odradek-process`` runs the broker as an ``odradek
serve`` child process instead of a thread of pytest (slower to start; its CPU is its
own). The ``odradek_broker_config`` ini option takes server.properties lines
(``num.partitions=3``) for the session's broker.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from odradek.testing.embedded import EmbeddedBroker

# Room for the suffix and counter within Kafka's 249-character topic name limit.
NAME_BASE_CHARS = 120
_topic_numbers = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("odradek", "odradek embedded broker")
    group.addoption(
        "--odradek-process",
        action="store_true",
        default=False,
        help="run the odradek_broker fixture's broker as an `odradek serve` process",
    )
    parser.addini(
        "odradek_broker_config",
        type="linelist",
        default=[],
        help="server.properties lines (KEY=VALUE) for the odradek_broker fixture",
    )


_CONFIG_KEY = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    """A malformed ``odradek_broker_config`` line stops the session at once, in one
    line (the values themselves are the broker's to check, when it starts)."""
    config.stash[_CONFIG_KEY] = _broker_config(config.getini("odradek_broker_config"))


def _broker_config(lines: list[str]) -> dict[str, str]:
    config = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"odradek_broker_config: {line!r} is not KEY=VALUE")
        config[key.strip()] = value.strip()
    return config


@pytest.fixture(scope="session")
def odradek_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    """A running single-node odradek broker shared by the whole session."""
    from odradek.testing.embedded import EmbeddedBroker

    broker = EmbeddedBroker(
        process=bool(request.config.getoption("odradek_process")),
        config=request.config.stash[_CONFIG_KEY],
        data_dir=tmp_path_factory.mktemp("odradek") / "data",
    )
    try:
        broker.start()
    except ValueError as error:  # a bad odradek_broker_config value: one line
        problem = str(error)
    else:
        problem = ""
    if problem:  # failed outside the handler: no "during handling" chain in the report
        pytest.fail(problem, pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def odradek_bootstrap(odradek_broker: EmbeddedBroker) -> str:
    """``bootstrap.servers`` of the session's broker."""
    return odradek_broker.bootstrap


@pytest.fixture
def odradek_topic_factory(
    odradek_broker: EmbeddedBroker, request: pytest.FixtureRequest
) -> Callable[..., str]:
    """``make(partitions=1, config=None, suffix="t")``: a new topic named after the test."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:NAME_BASE_CHARS]

    def make(
        partitions: int = 1, config: Mapping[str, str] | None = None, suffix: str = "t"
    ) -> str:
        name = f"{base or 'topic'}-{suffix}-{next(_topic_numbers)}"
        return odradek_broker.create_topic(name, partitions, config=config)

    return make


@pytest.fixture
def odradek_topic(odradek_topic_factory: Callable[..., str]) -> str:
    """A new one-partition topic for this test alone."""
    return odradek_topic_factory()
