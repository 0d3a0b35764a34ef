"""JSON Web Tokens as OAUTHBEARER carries them: decoding, JWKS keys, signature checks.

How this works and why: a token is three base64url parts, ``header.claims.signature``
(RFC 7515 compact JWS). Kafka brokers accept two kinds: *unsecured* tokens
(``"alg": "none"``, an empty signature; Kafka's OAuthBearerUnsecuredValidator, for
development and tests — librdkafka makes one itself from ``sasl.oauthbearer.config``)
and *signed* ones checked against the identity provider's public keys, published as
a JSON Web Key Set (RFC 7517) at ``sasl.oauthbearer.jwks.endpoint.url``. The claims
both check are the standard ones: ``exp`` (required), ``iat``/``nbf`` (not in the
future), ``sub`` (or the configured claim) as the principal, ``scope`` (a space-
separated string or a list), and for signed tokens ``aud``/``iss`` when configured.

Everything here is pure: the clock is passed in (seconds since the epoch) and fetching
the key set is the caller's business (``JsonWebKeySet.from_json`` takes the document).
Signatures are verified with ``cryptography``: RS256/384/512 (PKCS#1 v1.5), PS256/
384/512 (PSS), ES256/384/512 (ECDSA; JWS's raw ``r||s`` is converted to DER) and EdDSA
(Ed25519).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

MAX_TOKEN_BYTES: Final = 64 * 1024  # a token is a header value, not a payload


class TokenError(Exception):
    """The token is malformed, expired, or fails a check; the text says which (for the
    broker's log — the client is told only that authentication failed)."""


@dataclass(frozen=True, slots=True)
class Jws:
    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes  # "header.claims" as sent: what the signature covers
    signature: bytes


def b64url_decode(part: str) -> bytes:
    if any(c in part for c in "+/="):
        raise TokenError("token is not base64url without padding")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("token part is not base64url") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_jws(token: str) -> Jws:
    """Split and decode a compact JWS; TokenError if it is not one."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenError(f"token of {len(token)} bytes is longer than {MAX_TOKEN_BYTES}")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError(f"token has {len(parts)} dot-separated parts, not 3")
    header, claims = (
        _json_object(b64url_decode(p), what)
        for p, what in zip(parts[:2], ("header", "claims"), strict=True)
    )
    return Jws(header, claims, f"{parts[0]}.{parts[1]}".encode(), b64url_decode(parts[2]))


def _json_object(raw: bytes, what: str) -> Mapping[str, Any]:
    try:
        value = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError, RecursionError):  # [[[[... nests past the stack
        raise TokenError(f"token {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError(f"token {what} is not a JSON object")
    return value


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """What every accepted token must satisfy, signed or not."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scopes: tuple[str, ...] = ()
    clock_skew_s: float = 0.0
    audiences: tuple[str, ...] = ()  # any one of them in ``aud``; empty: not checked
    issuer: str | None = None  # ``iss`` must equal it; None: not checked


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal: str  # the principal claim's value (the user name)
    expires_at_s: float  # ``exp``
    scopes: tuple[str, ...]
    claims: Mapping[str, Any] = field(repr=False, default_factory=dict)


def check_claims(claims: Mapping[str, Any], rules: ClaimRules, now_s: float) -> ValidToken:
    """The token's principal and expiry if its claims pass ``rules`` at ``now_s``."""
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise TokenError("token has no numeric exp claim")
    if exp + rules.clock_skew_s <= now_s:
        raise TokenError(f"token expired at {exp} (now {now_s:.0f})")
    for name in ("iat", "nbf"):
        value = claims.get(name)
        if value is None:
            continue
        if not _is_number(value):
            raise TokenError(f"token's {name} claim is not a number")
        if value - rules.clock_skew_s > now_s:
            raise TokenError(f"token's {name} {value} is in the future (now {now_s:.0f})")
    principal = claims.get(rules.principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise TokenError(f"token has no {rules.principal_claim} claim naming a principal")
    scopes = _scopes(claims.get(rules.scope_claim))
    missing = [s for s in rules.required_scopes if s not in scopes]
    if missing:
        raise TokenError(f"token lacks required scope(s) {', '.join(missing)}")
    if rules.audiences:
        audience = claims.get("aud")
        given = [audience] if isinstance(audience, str) else audience
        if not isinstance(given, list) or not set(rules.audiences) & {
            a for a in given if isinstance(a, str)
        }:
            raise TokenError(f"token audience {audience!r} is not one of {list(rules.audiences)}")
    if rules.issuer is not None and claims.get("iss") != rules.issuer:
        raise TokenError(f"token issuer {claims.get('iss')!r} is not {rules.issuer!r}")
    return ValidToken(principal, float(exp), scopes, claims)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scopes(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise TokenError("token's scope claim is neither a string nor a list of strings")


def validate_unsecured(token: str, rules: ClaimRules, now_s: float) -> ValidToken:
    """Kafka's unsecured validator: ``alg`` none, no signature, then the claims."""
    jws = decode_jws(token)
    if jws.header.get("alg") != "none":
        raise TokenError(f"unsecured token has alg {jws.header.get('alg')!r}, not 'none'")
    if jws.signature:
        raise TokenError("unsecured token carries a signature")
    return check_claims(jws.claims, rules, now_s)


# -- signed tokens ---------------------------------------------------------------------
_HASHES: Final[dict[str, type[hashes.SHA256 | hashes.SHA384 | hashes.SHA512]]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES: Final[dict[str, type[ec.SECP256R1 | ec.SECP384R1 | ec.SECP521R1]]] = {
    "P-256": ec.SECP256R1,
    "P-384": ec.SECP384R1,
    "P-521": ec.SECP521R1,
}
_EC_SIZES: Final = {"ES256": 32, "ES384": 48, "ES512": 66}
SIGNED_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


@dataclass(frozen=True, slots=True)
class JsonWebKeySet:
    """Public keys by ``kid`` (a key without one is usable by tokens without one)."""

    keys: Mapping[str, PublicKey]

    @classmethod
    def from_json(cls, document: bytes | str | Mapping[str, Any]) -> JsonWebKeySet:
        """Parse a JWKS document; keys of unknown types or for encryption are skipped,
        a document that is not a key set is a TokenError."""
        if isinstance(document, bytes | str):
            try:
                document = json.loads(document)
            except (ValueError, RecursionError):
                raise TokenError("JWKS document is not JSON") from None
        entries = document.get("keys") if isinstance(document, Mapping) else None
        if not isinstance(entries, list):
            raise TokenError("JWKS document has no keys array")
        keys: dict[str, PublicKey] = {}
        for entry in entries:
            if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig":
                continue
            key = _public_key(entry)
            if key is not None:
                keys[str(entry.get("kid", ""))] = key
        return cls(keys)


def _public_key(jwk: Mapping[str, Any]) -> PublicKey | None:
    try:
        kty = jwk.get("kty")
        if kty == "RSA":
            n = int.from_bytes(b64url_decode(jwk["n"]), "big")
            e = int.from_bytes(b64url_decode(jwk["e"]), "big")
            return rsa.RSAPublicNumbers(e, n).public_key()
        if kty == "EC" and jwk.get("crv") in _CURVES:
            x = int.from_bytes(b64url_decode(jwk["x"]), "big")
            y = int.from_bytes(b64url_decode(jwk["y"]), "big")
            return ec.EllipticCurvePublicNumbers(x, y, _CURVES[jwk["crv"]]()).public_key()
        if kty == "OKP" and jwk.get("crv") == "Ed25519":
            return ed25519.Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))
    except (KeyError, TypeError, ValueError, TokenError):
        return None
    return None


def validate_signed(token: str, keys: JsonWebKeySet, rules: ClaimRules, now_s: float) -> ValidToken:
    """A signed token whose signature one of ``keys`` verifies, then its claims."""
    jws = decode_jws(token)
    alg = jws.header.get("alg")
    if alg not in SIGNED_ALGORITHMS:
        raise TokenError(f"token algorithm {alg!r} is not accepted")
    kid = str(jws.header.get("kid", ""))
    key = keys.keys.get(kid)
    if key is None:
        raise TokenError(f"no key {kid!r} in the JWKS")
    try:
        _verify(str(alg), key, jws.signature, jws.signing_input)
    except (InvalidSignature, TypeError, ValueError):
        raise TokenError(f"token signature does not verify with key {kid!r}") from None
    return check_claims(jws.claims, rules, now_s)


def _verify(alg: str, key: PublicKey, signature: bytes, data: bytes) -> None:
    if alg == "EdDSA":
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise TypeError("EdDSA token, non-Ed25519 key")
        key.verify(signature, data)
        return
    digest = _HASHES[alg[2:]]()
    if alg.startswith(("RS", "PS")):
        if not isinstance(key, rsa.RSAPublicKey):
            raise TypeError(f"{alg} token, non-RSA key")
        pad: padding.AsymmetricPadding = (
            padding.PKCS1v15()
            if alg.startswith("RS")
            else padding.PSS(padding.MGF1(digest), padding.PSS.DIGEST_LENGTH)
        )
        key.verify(signature, data, pad, digest)
        return
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise TypeError(f"{alg} token, non-EC key")
    size = _EC_SIZES[alg]
    if len(signature) != 2 * size:
        raise ValueError("ECDSA signature of the wrong length")
    r = int.from_bytes(signature[:size], "big")
    s = int.from_bytes(signature[size:], "big")
    key.verify(encode_dss_signature(r, s), data, ec.ECDSA(digest))


def unsecured_token(claims: Mapping[str, Any]) -> str:
    """An ``alg: none`` token (what librdkafka builds from sasl.oauthbearer.config)."""
    header = b64url_encode(json.dumps({"alg": "none"}).encode())
    body = b64url_encode(json.dumps(dict(claims)).encode())
    return f"{header}.{body}."
