"""The JWKS refresh policy: stale sets and unknown key ids refetch, failures back off."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from odradek.network.jwks import JwksSettings, JwksSource, fetch_url
from odradek.security.jwt import b64url_encode

ED_KEY = {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(bytes(range(32)))}


def key_set(*kids: str) -> bytes:
    return json.dumps({"keys": [{**ED_KEY, "kid": kid} for kid in kids]}).encode()


class Provider:
    def __init__(self) -> None:
        self.now = 0.0
        self.documents: list[bytes | Exception] = []
        self.fetches = 0

    def clock(self) -> float:
        return self.now

    def fetch(self, url: str, timeout_s: float) -> bytes:
        self.fetches += 1
        document = self.documents.pop(0) if len(self.documents) > 1 else self.documents[0]
        if isinstance(document, Exception):
            raise document
        return document


def source(provider: Provider) -> JwksSource:
    settings = JwksSettings("https://idp/jwks", refresh_ms=60_000, retry_backoff_ms=100)
    return JwksSource(settings, fetch=provider.fetch, clock=provider.clock)


def test_a_known_key_in_a_fresh_set_costs_no_fetch() -> None:
    provider = Provider()
    provider.documents = [key_set("a")]
    jwks = source(provider)
    jwks.load()
    assert set(asyncio.run(jwks.keys_for("a")).keys) == {"a"}
    assert provider.fetches == 1


def test_an_unknown_kid_refetches_but_only_once_per_backoff() -> None:
    provider = Provider()
    provider.documents = [key_set("a"), key_set("a", "b")]
    jwks = source(provider)
    jwks.load()
    provider.now = 0.05  # within retry.backoff of the load: no fetch for made-up kids
    assert "b" not in asyncio.run(jwks.keys_for("b")).keys
    provider.now = 0.2
    assert "b" in asyncio.run(jwks.keys_for("b")).keys  # the provider rotated its keys
    assert provider.fetches == 2
    provider.now = 0.25
    asyncio.run(jwks.keys_for("zz"))
    assert provider.fetches == 2


def test_a_stale_set_is_refreshed() -> None:
    provider = Provider()
    provider.documents = [key_set("a"), key_set("c")]
    jwks = source(provider)
    jwks.load()
    provider.now = 61.0
    assert set(asyncio.run(jwks.keys_for("a")).keys) == {"c"}


def test_a_failed_fetch_keeps_the_last_set_and_backs_off_exponentially() -> None:
    provider = Provider()
    provider.documents = [key_set("a"), OSError("down"), OSError("down"), b"not json"]
    jwks = source(provider)
    jwks.load()
    provider.now = 61.0
    for expected_backoff in (0.1, 0.2, 0.4):
        assert set(asyncio.run(jwks.keys_for("a")).keys) == {"a"}
        fetches = provider.fetches
        provider.now += expected_backoff * 0.9
        asyncio.run(jwks.keys_for("a"))
        assert provider.fetches == fetches  # still backing off
        provider.now += expected_backoff * 0.2


def test_file_urls_are_read(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(key_set("local"))
    jwks = JwksSource(JwksSettings(path.as_uri()))
    assert set(jwks.load().keys) == {"local"}
    assert fetch_url(path.as_uri(), 1.0) == key_set("local")
