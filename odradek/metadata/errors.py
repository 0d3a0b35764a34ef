"""The controller's error: a rejected change, with the Kafka error name clients get."""

from __future__ import annotations


class ControllerError(Exception):
    """A rejected change; ``code`` is the Kafka error name, the message is for clients."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


__all__ = ["ControllerError"]
