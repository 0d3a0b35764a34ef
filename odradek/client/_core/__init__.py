"""What every part of the client shares: broker connections, the cluster view
(metadata, routing, retries), errors, configuration, the confluent-shaped value types
and the loop thread the blocking faces run on.
"""
