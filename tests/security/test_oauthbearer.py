"""OAUTHBEARER's pure parts: the RFC 7628 client message, unsecured and signed JWTs."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given
from hypothesis import strategies as st

from odradek.security.jwt import (
    ClaimRules,
    JsonWebKeySet,
    TokenError,
    b64url_encode,
    decode_jws,
    unsecured_token,
    validate_signed,
    validate_unsecured,
)
from odradek.security.oauthbearer import (
    OAuthBearerFailed,
    OAuthBearerServer,
    parse_client_first,
)

NOW = 1_800_000_000.0


def message(token: str, gs2: str = "n,,", **extensions: str) -> bytes:
    pairs = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"{gs2}\x01auth=Bearer {token}\x01{pairs}\x01".encode()


def test_client_first_message_with_authzid_and_extensions() -> None:
    first = parse_client_first(message("abc.def.", "n,a=alice,", traceId="42"))
    assert (first.token, first.authzid, dict(first.extensions)) == (
        "abc.def.",
        "alice",
        {"traceId": "42"},
    )
    assert parse_client_first(message("t.t.")).authzid is None


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"n,,",
        b"n,,\x01auth=Bearer x\x01",  # the final \x01 is missing
        b"p=tls-unique,,\x01auth=Bearer x\x01\x01",  # channel binding is not offered
        b"n,,\x01\x01",  # no auth pair
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01auth=Bearer x\x01auth=Bearer y\x01\x01",
        b"n,,\x01no-equals\x01\x01",
        b"\xff\xfe",
    ],
)
def test_malformed_client_messages_fail_cleanly(raw: bytes) -> None:
    with pytest.raises(OAuthBearerFailed):
        parse_client_first(raw)


@given(st.binary(max_size=200))
def test_any_bytes_either_parse_or_fail_as_oauthbearer_errors(raw: bytes) -> None:
    with contextlib.suppress(OAuthBearerFailed):
        parse_client_first(raw)


@given(st.text(max_size=200))
def test_any_text_either_decodes_or_fails_as_token_errors(text: str) -> None:
    with contextlib.suppress(TokenError):
        decode_jws(text)


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "iat": NOW - 10, "exp": NOW + 3600, **extra}


def test_unsecured_token_gives_its_subject_and_expiry() -> None:
    token = validate_unsecured(unsecured_token(claims(scope="read write")), ClaimRules(), NOW)
    assert (token.principal, token.expires_at_s, token.scopes) == (
        "alice",
        NOW + 3600,
        ("read", "write"),
    )


@pytest.mark.parametrize(
    ("token_claims", "rules", "why"),
    [
        (claims(exp=NOW - 1), ClaimRules(), "expired"),
        ({"sub": "alice"}, ClaimRules(), "no numeric exp"),
        (claims(iat=NOW + 600), ClaimRules(), "in the future"),
        (claims(sub=""), ClaimRules(), "no sub claim"),
        (claims(), ClaimRules(required_scopes=("admin",)), "required scope"),
        (claims(), ClaimRules(principal_claim="email"), "no email claim"),
        (claims(scope=7), ClaimRules(), "scope claim"),
    ],
)
def test_unsecured_token_checks(token_claims: dict[str, Any], rules: ClaimRules, why: str) -> None:
    with pytest.raises(TokenError, match=why):
        validate_unsecured(unsecured_token(token_claims), rules, NOW)


def test_clock_skew_allows_a_just_expired_token() -> None:
    token = unsecured_token(claims(exp=NOW - 5))
    assert validate_unsecured(token, ClaimRules(clock_skew_s=30), NOW).principal == "alice"


def test_an_unsecured_validator_refuses_signed_tokens() -> None:
    header = b64url_encode(json.dumps({"alg": "RS256"}).encode())
    body = b64url_encode(json.dumps(claims()).encode())
    with pytest.raises(TokenError, match="alg 'RS256'"):
        validate_unsecured(f"{header}.{body}.c2ln", ClaimRules(), NOW)


# -- signed tokens ----------------------------------------------------------------------
def _int_b64(value: int, size: int | None = None) -> str:
    size = size or (value.bit_length() + 7) // 8
    return b64url_encode(value.to_bytes(size, "big"))


def sign(alg: str, key: Any, kid: str, token_claims: dict[str, Any]) -> str:
    header = b64url_encode(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
    body = b64url_encode(json.dumps(token_claims).encode())
    data = f"{header}.{body}".encode()
    if alg == "RS256":
        signature = key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "PS384":
        pss = padding.PSS(padding.MGF1(hashes.SHA384()), padding.PSS.DIGEST_LENGTH)
        signature = key.sign(data, pss, hashes.SHA384())
    elif alg == "ES256":
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        signature = key.sign(data)
    return f"{header}.{body}.{b64url_encode(signature)}"


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "ed": ed25519.Ed25519PrivateKey.generate(),
    }


@pytest.fixture(scope="module")
def jwks(keys: dict[str, Any]) -> JsonWebKeySet:
    rsa_numbers = keys["rsa"].public_key().public_numbers()
    ec_numbers = keys["ec"].public_key().public_numbers()
    ed_raw = keys["ed"].public_key().public_bytes_raw()
    document = {
        "keys": [
            {
                "kty": "RSA",
                "kid": "r1",
                "use": "sig",
                "n": _int_b64(rsa_numbers.n),
                "e": _int_b64(rsa_numbers.e),
            },
            {
                "kty": "EC",
                "kid": "e1",
                "crv": "P-256",
                "x": _int_b64(ec_numbers.x, 32),
                "y": _int_b64(ec_numbers.y, 32),
            },
            {"kty": "OKP", "kid": "d1", "crv": "Ed25519", "x": b64url_encode(ed_raw)},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
        ]
    }
    return JsonWebKeySet.from_json(json.dumps(document))


@pytest.mark.parametrize(
    ("alg", "key", "kid"),
    [("RS256", "rsa", "r1"), ("PS384", "rsa", "r1"), ("ES256", "ec", "e1"), ("EdDSA", "ed", "d1")],
)
def test_signed_tokens_verify_with_their_jwks_key(
    keys: dict[str, Any], jwks: JsonWebKeySet, alg: str, key: str, kid: str
) -> None:
    token = sign(alg, keys[key], kid, claims(aud="kafka", iss="https://idp"))
    rules = ClaimRules(audiences=("kafka",), issuer="https://idp")
    assert validate_signed(token, jwks, rules, NOW).principal == "alice"


def test_only_signing_keys_of_known_types_are_kept(jwks: JsonWebKeySet) -> None:
    assert set(jwks.keys) == {"r1", "e1", "d1"}


def test_signed_token_failures(keys: dict[str, Any], jwks: JsonWebKeySet) -> None:
    good = sign("RS256", keys["rsa"], "r1", claims())
    header, _body, signature = good.split(".")
    forged = b64url_encode(json.dumps(claims(sub="admin")).encode())
    with pytest.raises(TokenError, match="does not verify"):
        validate_signed(f"{header}.{forged}.{signature}", jwks, ClaimRules(), NOW)
    with pytest.raises(TokenError, match="no key 'zz'"):
        validate_signed(sign("RS256", keys["rsa"], "zz", claims()), jwks, ClaimRules(), NOW)
    with pytest.raises(TokenError, match="does not verify"):  # the EC key under the RSA kid
        validate_signed(sign("ES256", keys["ec"], "r1", claims()), jwks, ClaimRules(), NOW)
    with pytest.raises(TokenError, match="not accepted"):
        validate_signed(unsecured_token(claims()), jwks, ClaimRules(), NOW)
    with pytest.raises(TokenError, match="audience"):
        validate_signed(good, jwks, ClaimRules(audiences=("other",)), NOW)
    with pytest.raises(TokenError, match="issuer"):
        validate_signed(good, jwks, ClaimRules(issuer="https://idp"), NOW)


def test_jwks_documents_that_are_not_key_sets() -> None:
    for document in (b"not json", b"[]", b'{"keys": 3}'):
        with pytest.raises(TokenError):
            JsonWebKeySet.from_json(document)


# -- the exchange -----------------------------------------------------------------------
def unsecured_validator(token: str) -> Any:
    return validate_unsecured(token, ClaimRules(), NOW)


def test_a_valid_token_completes_in_one_step() -> None:
    server = OAuthBearerServer(unsecured_validator)
    assert server.respond(message(unsecured_token(claims()))) == b""
    assert (server.complete, server.principal, server.expires_at_s) == (True, "alice", NOW + 3600)


def test_a_bad_token_gets_the_error_challenge_then_fails() -> None:
    server = OAuthBearerServer(unsecured_validator)
    challenge = server.respond(message(unsecured_token(claims(exp=NOW - 60))))
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert not server.complete
    with pytest.raises(OAuthBearerFailed, match="expired"):  # the reason is for the log
        server.respond(b"\x01")


def test_an_authzid_other_than_the_token_principal_fails() -> None:
    server = OAuthBearerServer(unsecured_validator)
    with pytest.raises(OAuthBearerFailed, match="authorization id"):
        server.respond(message(unsecured_token(claims()), "n,a=admin,"))


def test_deeply_nested_claims_are_a_token_error_not_a_crash() -> None:
    nested = b64url_encode(b"[" * 20_000)
    with pytest.raises(TokenError, match="not JSON"):
        decode_jws(f"{nested}.{nested}.")
