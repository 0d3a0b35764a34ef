"""Readable text for ``__cluster_metadata`` records (``dump-log --cluster-metadata-decoder``).

Like Kafka's DumpLogSegments metadata decoder: each record of the metadata log is one
cluster change, keyed by its kind (``Topic``, ``Partition``, ``PartitionChange``,
``RegisterBroker``, ``FenceBroker``, ``UnfenceBroker``, ``Config``, ...) with its fields as JSON
(odradek's record format, see ``odradek/metadata/image.py``), printed as
``payload: {"type":"Topic","data":{...}}``.
A record that does not decode is shown as such rather than stopping the dump.
"""

from __future__ import annotations

import json

METADATA_TOPIC_PREFIX = "__cluster_metadata-"


def describe(key: bytes | None, value: bytes | None) -> str:
    """The payload text of one metadata record."""
    if key is None or value is None:
        return "<metadata record without a key or value>"
    try:
        kind = key.decode()
        fields = json.loads(value.decode())
    except (UnicodeDecodeError, ValueError) as error:
        return f"<undecodable metadata record: {error}>"
    return json.dumps({"type": kind, "data": fields}, sort_keys=True, separators=(",", ":"))
