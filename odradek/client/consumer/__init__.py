"""The consumer: the asyncio core (``core.ConsumerCore``), the confluent-kafka-shaped
blocking ``Consumer`` and the aiokafka-shaped ``AIOKafkaConsumer`` over it, fetch
decoding, offsets and classic group membership with its assignors.
"""
