"""Test certificates made with ``cryptography``: a CA, a broker certificate for
127.0.0.1/localhost and client certificates, as PEM and PKCS12 files in a tmp dir.

Nothing is checked in: every test run makes its own keys (EC P-256, fast to make).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "changeit"


@dataclass(frozen=True)
class Identity:
    cert: Path  # PEM certificate (chain: the certificate alone, the CA is trusted)
    key: Path  # PEM private key, unencrypted
    keystore_pem: Path  # key + certificate in one PEM file (Kafka's PEM keystore)
    encrypted_keystore_pem: Path  # the same with the key encrypted by PASSWORD
    keystore_p12: Path  # PKCS12, password PASSWORD


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA certificate, PEM
    ca_p12: Path  # a PKCS12 truststore holding the CA, password PASSWORD
    server: Identity
    alice: Identity  # CN=alice,OU=eng,O=acme
    other_ca: Path  # a CA that signed nothing here: trusting it must fail


def _name(**attributes: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME}
    oids["O"] = NameOID.ORGANIZATION_NAME
    # Most significant first in the certificate; RFC 2253 strings list it last.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(attributes.items())])


def _ca(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(CN=name, O="odradek-tests")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _identity(
    directory: Path,
    stem: str,
    subject: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    *,
    server: bool,
) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            # A broker's certificate is also its client certificate towards the other
            # brokers and the controllers (mTLS between nodes).
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    encrypted_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode()),
    )
    paths = Identity(
        cert=directory / f"{stem}.crt",
        key=directory / f"{stem}.key",
        keystore_pem=directory / f"{stem}-keystore.pem",
        encrypted_keystore_pem=directory / f"{stem}-keystore-encrypted.pem",
        keystore_p12=directory / f"{stem}.p12",
    )
    paths.cert.write_bytes(cert_pem)
    paths.key.write_bytes(key_pem)
    paths.keystore_pem.write_bytes(key_pem + cert_pem)
    paths.encrypted_keystore_pem.write_bytes(encrypted_pem + cert_pem)
    paths.keystore_p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            stem.encode(),
            key,
            cert,
            [ca_cert],
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    return paths


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("odradek test CA")
    ca = directory / "ca.crt"
    ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    ca_p12 = directory / "truststore.p12"
    ca_p12.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca_cert, b"ca")],
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    _, other_cert = _ca("some other CA")
    other_ca = directory / "other-ca.crt"
    other_ca.write_bytes(other_cert.public_bytes(serialization.Encoding.PEM))
    server = _identity(directory, "broker", _name(CN="localhost"), ca_key, ca_cert, server=True)
    alice = _identity(
        directory, "alice", _name(CN="alice", OU="eng", O="acme"), ca_key, ca_cert, server=False
    )
    return Certs(ca, ca_p12, server, alice, other_ca)
