"""The identity provider's signing keys for OAUTHBEARER, fetched and kept fresh.

How this works and why: with ``sasl.oauthbearer.jwks.endpoint.url`` set, the broker
checks signed tokens against the JSON Web Key Set published there (security/jwt.py
does the checking). Kafka fetches the set at start-up, refreshes it every
``sasl.oauthbearer.jwks.endpoint.refresh.ms`` and, when a token names a key id the set
does not hold (the provider rotated its keys), refetches at once — at most once per
``retry.backoff`` interval, so tokens with made-up key ids cannot make the broker hammer
the provider. A failed fetch keeps the last good set and retries with exponential
backoff from ``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`` up to
``...retry.backoff.max.ms``. ``file:`` URLs are read from disk (Kafka allows a local
JWKS file for tests and air-gapped setups).

The fetch itself (urllib, blocking) runs on a worker thread; the clock and the fetch
function are injectable so the refresh policy is tested without a network.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from odradek.security.jwt import JsonWebKeySet, TokenError

logger = logging.getLogger(__name__)

MAX_JWKS_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class JwksSettings:
    url: str
    refresh_ms: int = 3_600_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10_000
    timeout_s: float = 10.0


def fetch_url(url: str, timeout_s: float) -> bytes:
    """The document at ``url`` (http(s) or file), at most MAX_JWKS_BYTES."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        body: bytes = response.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"JWKS at {url} is larger than {MAX_JWKS_BYTES} bytes")
    return body


class JwksSource:
    def __init__(
        self,
        settings: JwksSettings,
        *,
        fetch: Callable[[str, float], bytes] = fetch_url,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._fetch = fetch
        self._clock = clock
        self.keys = JsonWebKeySet({})
        self._fetched_at: float | None = None  # last successful fetch
        self._next_attempt = 0.0  # earliest time another fetch may start
        self._failures = 0
        self._lock = asyncio.Lock()

    def load(self) -> JsonWebKeySet:
        """Fetch now, blocking (start-up); raises what the fetch or parse raised."""
        self._install(
            JsonWebKeySet.from_json(self._fetch(self.settings.url, self.settings.timeout_s))
        )
        return self.keys

    def _install(self, keys: JsonWebKeySet) -> None:
        self.keys = keys
        self._fetched_at = self._clock()
        self._failures = 0
        self._next_attempt = self._fetched_at + self.settings.retry_backoff_ms / 1000

    def _stale(self) -> bool:
        return (
            self._fetched_at is None
            or self._clock() - self._fetched_at >= self.settings.refresh_ms / 1000
        )

    async def keys_for(self, kid: str) -> JsonWebKeySet:
        """The current set, refetched first if it is stale or lacks ``kid`` (and the
        backoff allows a fetch now)."""
        if (kid in self.keys.keys and not self._stale()) or self._clock() < self._next_attempt:
            return self.keys
        async with self._lock:
            if (kid in self.keys.keys and not self._stale()) or self._clock() < self._next_attempt:
                return self.keys
            await self.refresh()
        return self.keys

    async def refresh(self) -> bool:
        """One fetch on a worker thread; False (and backoff) if it failed."""
        settings = self.settings
        try:
            body = await asyncio.to_thread(self._fetch, settings.url, settings.timeout_s)
            keys = JsonWebKeySet.from_json(body)
        except (OSError, ValueError, TokenError) as error:
            self._failures += 1
            backoff_ms = min(
                settings.retry_backoff_ms * 2 ** (self._failures - 1),
                settings.retry_backoff_max_ms,
            )
            self._next_attempt = self._clock() + backoff_ms / 1000
            logger.warning(
                "cannot refresh the JWKS from %s (%s); keeping %d key(s), retrying in %d ms",
                settings.url,
                error,
                len(self.keys.keys),
                backoff_ms,
            )
            return False
        self._install(keys)
        return True
