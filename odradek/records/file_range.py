"""``FileRange``: bytes of a log file that travel to a socket without entering Python.

How this works and why: a fetch response names record bytes by file, position and
length; storage produces these ranges, the Fetch codec places them in the response
and the network layer hands them to ``os.sendfile``. It lives here, beside the
record codecs, so neither the network nor the protocol layer imports storage.
"""

from __future__ import annotations

from typing import NamedTuple


class FileRange(NamedTuple):
    """Bytes of a segment file to send with ``os.sendfile``."""

    fd: int
    position: int
    length: int


class MemoryRange(NamedTuple):
    """Record bytes already in memory (a read from remote storage, KIP-405): sent as
    they are, where a FileRange would be sendfile'd."""

    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


RecordRange = FileRange | MemoryRange
"""What a fetch response's records are made of."""
