"""The transaction coordinator (coordinator.py, over shard.py/state.py/records.py) and
the producer ids it hands out (producer_id_manager.py)."""
