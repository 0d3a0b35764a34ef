"""A metadata commit larger than a topic's 1 MiB batch limit still commits.

Each controller commit is one batch of the metadata log, and a CreateTopics at the
per-request limit of 10,000 partitions is about 1.7 MB of records: the metadata log
refused it with RecordTooLargeError (the request failed inside the controller). The
controller runs in-process here; no partition logs are created.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.metadata.controller import Controller
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import MAX_PARTITIONS_PER_REQUEST, NewTopic
from odradek.metadata.writer import LocalMetadataWriter
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.storage.log_loader import open_log
from tests.support.brokers import register_unfenced


def test_create_topics_at_the_partition_limit_commits_and_replays(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"

    async def create() -> object:
        log, _ = open_log(directory, METADATA_LOG_CONFIG)
        loader = MetadataLoader()
        controller = Controller(
            LocalMetadataWriter(log, loader),
            loader,
            0,
            lambda: {"num.partitions": 1, "default.replication.factor": 1},
        )
        await register_unfenced(controller, 0)
        (result,) = await controller.create_topics(
            [NewTopic("wide", MAX_PARTITIONS_PER_REQUEST, 1)], False
        )
        log.close()
        return result

    result = asyncio.run(create())
    assert isinstance(result, MetadataImage), result
    assert len(result.topics["wide"].partitions) == MAX_PARTITIONS_PER_REQUEST
    log, _ = open_log(directory, METADATA_LOG_CONFIG, strict=True)
    loader = MetadataLoader()
    replayed = LocalMetadataWriter(log, loader).replay()
    assert len(replayed.topics["wide"].partitions) == MAX_PARTITIONS_PER_REQUEST
    log.close()
