"""AlterUserScramCredentials through the controller channels: the local channel commits
through a real Controller (the image shows the credential on return), and the gated
channel of a node that is not the active controller answers every user NOT_CONTROLLER
before looking at anything, so the forwarding broker asks the next controller."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import GatedControllerChannel, LocalControllerChannel
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.scram_changes import ScramDeletion, ScramUpsertion
from odradek.metadata.writer import LocalMetadataWriter
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.storage.log_loader import open_log

SALT = b"salt"


class NoConfigRules:
    """ConfigRules this test never reaches (no config change is made)."""

    def changes(self, *args: object) -> Any:
        raise AssertionError("no config change expected")

    def validator(self, *args: object) -> None:
        return None


def upsertion(user: str, iterations: int = 4096) -> ScramUpsertion:
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", SALT, iterations)
    return ScramUpsertion(user, 1, iterations, SALT, salted)


def test_the_local_channel_commits_and_the_gate_refuses_when_not_active(tmp_path: Path) -> None:
    async def scenario() -> None:
        log, _ = open_log(tmp_path / "__cluster_metadata-0", METADATA_LOG_CONFIG)
        try:
            loader = MetadataLoader()
            controller = Controller(LocalMetadataWriter(log, loader), loader, 1, lambda: {})
            local = LocalControllerChannel(lambda: controller, NoConfigRules())
            results = await local.alter_user_scram_credentials(
                [ScramDeletion("nobody", 1)], [upsertion("alice"), upsertion("bob", 100)]
            )
            assert [(u, getattr(e, "code", None)) for u, e in results] == [
                ("nobody", "RESOURCE_NOT_FOUND"),
                ("alice", None),
                ("bob", "UNACCEPTABLE_CREDENTIAL"),
            ]
            assert set(controller.image.scram_credentials) == {("alice", "SCRAM-SHA-256")}
            offset = controller.image.offset

            gate = GatedControllerChannel(local, lambda: False, lambda: 2)
            refused = await gate.alter_user_scram_credentials(
                [ScramDeletion("alice", 1)], [upsertion("carol"), upsertion("alice")]
            )
            assert [(u, e.code if e else None) for u, e in refused] == [
                ("alice", "NOT_CONTROLLER"),
                ("carol", "NOT_CONTROLLER"),
            ]
            assert "leader: 2" in str(refused[0][1])
            assert controller.image.offset == offset  # nothing committed
            open_gate = GatedControllerChannel(local, lambda: True, lambda: 1)
            gone = await open_gate.alter_user_scram_credentials([ScramDeletion("alice", 1)], [])
            assert gone == [("alice", None)] and not controller.image.scram_credentials
        finally:
            log.close()

    asyncio.run(scenario())
