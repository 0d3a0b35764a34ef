"""MetadataLoader: committed metadata batches in, (delta, image) publications out.

How this works and why (KRaft's MetadataLoader): the controller decides and writes;
it does not apply. Whatever holds the committed log — the local ``__cluster_metadata``
of a single node (writer.LocalMetadataWriter) today, the Raft client tomorrow — hands
each committed batch ``(last offset, records)`` to ``handle_commit``. The loader folds
it into a new immutable MetadataImage, computes the MetadataDelta from the image
before, and publishes ``(delta, image)`` to every subscriber in the order they
subscribed: the controller first (its image for the next decision), then the broker
(logs, coordinators, quotas).

Start-up goes through the same path: ``replay()`` opens one run that takes any number
of batches and publishes once when ``finish()`` is called, so a long log is folded
into one image and one delta instead of one per batch. A run that is abandoned (the
reader found damage and raised) publishes nothing and leaves the image as it was.

Nothing here reads files or knows who is leader, so a broker-only node is fed the same
way by its replica of the metadata log: whatever learns that a batch is committed
calls ``handle_commit``. Offsets must grow; a batch at or below the loaded offset is a
bug in the feeder (AssertionError).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.image import ImageReplay, MetadataImage, MetadataRecord

logger = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader:
    def __init__(self, image: MetadataImage | None = None) -> None:
        self._image = image or MetadataImage()
        self._publishers: list[Publisher] = []

    @property
    def image(self) -> MetadataImage:
        """The image of everything published so far."""
        return self._image

    def subscribe(self, publisher: Publisher) -> None:
        """Receive every later publication (not the current image: read ``image``)."""
        self._publishers.append(publisher)

    def handle_commit(self, offset: int, records: Sequence[MetadataRecord]) -> MetadataImage:
        """One committed batch whose last record is at ``offset``; the new image."""
        run = self.replay()
        run.apply(offset, records)
        return run.finish()

    def replay(self) -> LoaderRun:
        """A run of committed batches published as one change by ``finish()``."""
        return LoaderRun(self)

    def reset_to_snapshot(
        self, end_offset: int, records: Sequence[MetadataRecord]
    ) -> MetadataImage:
        """Replace the image by a snapshot's (every record below ``end_offset``), past
        what was applied: a running follower whose leader's log no longer holds what it
        lacks. The image is rebuilt from the snapshot alone and the delta compares the
        whole of both images (a topic missing from the snapshot is deleted)."""
        assert end_offset - 1 > self._image.offset, (end_offset, self._image.offset)
        replay = ImageReplay()
        replay.apply(records, end_offset - 1)
        image = replay.image()
        return self._publish_image(between(self._image, image), image)

    def _publish(self, run: ImageReplay) -> MetadataImage:
        assert run.start is self._image, "two loader runs overlapped"
        image = run.image()
        return self._publish_image(between(self._image, image, run.changed), image)

    def _publish_image(self, delta: MetadataDelta, image: MetadataImage) -> MetadataImage:
        self._image = image
        for publisher in self._publishers:
            try:
                publisher(delta, image)
            except Exception:  # committed is committed: the others still hear of it
                logger.exception(
                    "metadata publisher %r failed at offset %d", publisher, image.offset
                )
        return image


class LoaderRun:
    """Batches applied so far in one run; nothing is visible until ``finish``."""

    def __init__(self, loader: MetadataLoader) -> None:
        self._loader = loader
        self._replay = ImageReplay(loader.image)
        self._batches = 0

    @property
    def offset(self) -> int:
        return self._replay.offset

    def apply(self, offset: int, records: Sequence[MetadataRecord]) -> None:
        """Fold a batch in. Raises ValueError/KeyError/TypeError for records that do not
        fit the image (unknown type, a partition of an unknown topic); the run is then
        unusable, and the caller reports where the batch was."""
        assert offset > self._replay.offset, f"batch at {offset} after {self._replay.offset}"
        self._replay.apply(records, offset)
        self._batches += 1

    def apply_snapshot(self, end_offset: int, records: Sequence[MetadataRecord]) -> None:
        """Start the run from a snapshot holding every record below ``end_offset``.

        Only as the first thing a run does on an empty loader: the snapshot's records
        rebuild the image the log up to ``end_offset - 1`` built (image.to_records)."""
        assert self._batches == 0 and self._replay.offset == -1, "a snapshot starts a run"
        self._replay.apply(records, end_offset - 1)
        self._batches += 1

    def preview(self) -> MetadataImage:
        """The image the run has built, without publishing it; the run is then done
        (start-up checks the uncommitted tail of a log this way)."""
        return self._replay.image()

    def finish(self) -> MetadataImage:
        """Publish the run's (delta, image), if it applied anything; the loader's image."""
        if self._batches == 0:
            return self._loader.image
        return self._loader._publish(self._replay)


__all__ = ["LoaderRun", "MetadataLoader", "Publisher"]
