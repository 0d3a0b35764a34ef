"""The producer: the asyncio core (``aio.AsyncProducer``/``AIOKafkaProducer``), the
blocking confluent-kafka-shaped ``Producer`` over it, the accumulator, sender,
partitioners and transactions.
"""
