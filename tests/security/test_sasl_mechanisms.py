"""The SASL mechanisms as state machines: RFC 7677's vector, and every way to fail."""

from __future__ import annotations

import base64

import pytest

from odradek.client._core.sasl import PlainClient, SaslAuthenticationError, ScramClient
from odradek.security.sasl_server import (
    AuthenticationFailed,
    PlainServer,
    ScramServer,
    decode_saslname,
)
from odradek.security.scram import ScramCredential, make_credential

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil", 4096 iterations.
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
PENCIL = make_credential("SCRAM-SHA-256", "pencil", salt=SALT, iterations=4096)


def rfc_server(lookup: dict[str, ScramCredential] | None = None) -> ScramServer:
    users = {"user": PENCIL} if lookup is None else lookup
    return ScramServer("SCRAM-SHA-256", users.get, server_nonce=lambda: SERVER_NONCE)


def test_scram_server_follows_rfc7677_vector() -> None:
    server = rfc_server()
    assert server.respond(CLIENT_FIRST) == SERVER_FIRST
    assert not server.complete
    assert server.respond(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_scram_client_follows_rfc7677_vector() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.next_token(None) == CLIENT_FIRST
    assert client.next_token(SERVER_FIRST) == CLIENT_FINAL
    assert client.next_token(SERVER_FINAL) is None  # the server's signature checked


def test_scram_client_refuses_a_server_without_the_key() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    client.next_token(None)
    client.next_token(SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="signature is wrong"):
        client.next_token(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "we,ird=name"])
def test_scram_round_trip(mechanism: str, user: str) -> None:
    credential = make_credential(mechanism, "s3cret")
    server = ScramServer(mechanism, {user: credential}.get)
    client = ScramClient(mechanism, user, "s3cret")
    reply = None
    while (token := client.next_token(reply)) is not None:
        reply = server.respond(token)
    assert server.complete and server.username == user


def exchange_failure(server: ScramServer, password: str, user: str = "user") -> str:
    client = ScramClient("SCRAM-SHA-256", user, password)
    server_first = server.respond(client.next_token(None) or b"")
    with pytest.raises(AuthenticationFailed) as caught:
        server.respond(client.next_token(server_first) or b"")
    return caught.value.reason


def test_wrong_password_and_unknown_user_fail_alike_at_the_proof() -> None:
    assert "wrong proof" in exchange_failure(rfc_server(), "pencil!")
    # An unknown user gets a server-first message too, with a salt stable per name.
    first_a = rfc_server({}).respond(b"n,,n=nobody,r=abc")
    first_b = rfc_server({}).respond(b"n,,n=nobody,r=abc")
    assert first_a.split(b",")[1] == first_b.split(b",")[1]
    assert first_a.startswith(b"r=abc" + SERVER_NONCE.encode() + b",s=")
    assert "unknown user" in exchange_failure(rfc_server({}), "pencil", user="nobody")


def test_bad_nonce_and_channel_binding_in_client_final() -> None:
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="nonce does not match"):
        server.respond(CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="channel binding does not match"):
        server.respond(CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))


@pytest.mark.parametrize(
    ("client_first", "needle"),
    [
        (b"p=tls-unique,,n=user,r=x", "channel binding is not supported"),
        (b"n,,m=ext,n=user,r=x", "mandatory extensions"),
        (b"n,,r=x,n=user", "lacks n= and r="),
        (b"n,,n=user,r=x,tokenauth=true", "tokenauth"),
        (b"n,a=other,n=user,r=x", "authorization id differs"),
        (b"n,,n=us=3Fer,r=x", "bad '=' escape"),
        (b"garbage", "malformed"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_bad_client_first(client_first: bytes, needle: str) -> None:
    with pytest.raises(AuthenticationFailed, match=needle):
        rfc_server().respond(client_first)


def test_proof_of_wrong_size_and_extra_tokens() -> None:
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="wrong size"):
        server.respond(CLIENT_FINAL.split(b",p=")[0] + b",p=AAAA")
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    server.respond(CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed, match="after the exchange"):
        server.respond(b"more")


def test_saslname_escapes() -> None:
    assert decode_saslname("a=2Cb=3Dc") == "a,b=c"


def test_plain_server() -> None:
    users = {"alice": "alice-secret"}
    server = PlainServer(users)
    assert server.respond(PlainClient("alice", "alice-secret").next_token(None) or b"") == b""
    assert server.complete and server.username == "alice"
    assert PlainServer(users).respond(b"alice\0alice\0alice-secret") == b""  # authzid = authcid
    for token, needle in [
        (b"\0alice\0wrong", "wrong password"),
        (b"\0bob\0alice-secret", "unknown user"),
        (b"bob\0alice\0alice-secret", "authorization id differs"),
        (b"\0\0x", "empty username"),
        (b"alice-secret", "expected authzid"),
    ]:
        with pytest.raises(AuthenticationFailed, match=needle):
            PlainServer(users).respond(token)


def test_legacy_librdkafka_nonce_form_and_nothing_else() -> None:
    """librdkafka 2.0 (kcat 1.7) echoes its own nonce before the combined one; that
    form is accepted (its proof still has to match), any other prefix is not."""
    credential = make_credential("SCRAM-SHA-256", "pw")

    def final_with(prefix: str) -> bytes:
        client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="cn")
        server = ScramServer("SCRAM-SHA-256", {"u": credential}.get, server_nonce=lambda: "sn")
        server_first = server.respond(client.next_token(None) or b"")
        final = (client.next_token(server_first) or b"").decode()
        without, _, _ = final.rpartition(",p=")
        legacy = without.replace("r=cnsn", f"r={prefix}cnsn")
        # Recompute the proof over the message as it will be sent.
        import hashlib
        import hmac as hmac_module

        from odradek.security.scram import MECHANISMS, salted_password

        mechanism = MECHANISMS["SCRAM-SHA-256"]
        salted = salted_password(mechanism, b"pw", credential.salt, credential.iterations)
        client_key = hmac_module.new(salted, b"Client Key", "sha256").digest()
        auth = f"n=u,r=cn,{server_first.decode()},{legacy}".encode()
        signature = hmac_module.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return server.respond(f"{legacy},p={base64.b64encode(proof).decode()}".encode())

    assert final_with("cn").startswith(b"v=")
    with pytest.raises(AuthenticationFailed, match="nonce does not match"):
        final_with("xx")
