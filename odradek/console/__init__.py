"""odradek's web console (``odradek console``): brokers, topics, records and groups of any
Kafka-compatible cluster, read and changed through odradek's own client (``app.py``)."""
