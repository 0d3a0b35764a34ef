"""The admin client: one asyncio core (``core``, ``topics``, ``configs``, ``groups``,
``records``) under the confluent-kafka-shaped ``AdminClient`` and the aiokafka-shaped
``AIOKafkaAdminClient``.
"""
