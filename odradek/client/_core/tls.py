"""The client's TLS: an ``ssl.SSLContext`` from librdkafka's ``ssl.*`` properties.

How this works and why: users of confluent-kafka configure TLS with librdkafka's
names, and odradek's confluent-shaped faces take the same dict:
``security.protocol=SSL``, ``ssl.ca.location`` (PEM CA certificates; unset, the
system's CAs), ``ssl.certificate.location`` + ``ssl.key.location`` (+
``ssl.key.password``) for a client certificate (mTLS),
``enable.ssl.certificate.verification`` (default true) and
``ssl.endpoint.identification.algorithm`` (``https``, librdkafka's default since 1.9:
the broker's certificate must name the host connected to; ``none``: it need not).
The aiokafka-shaped faces pass aiokafka's ``ssl_context`` instead (``ssl.context``
here), used as given. A bad file or password is a ``ConfigError`` when the client is
made, before any connection.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

TLS_PROTOCOLS = ("SSL", "SASL_SSL")


class TlsSettingsError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def client_ssl_context(values: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The context for ``security.protocol`` SSL/SASL_SSL; None for plaintext."""
    if values.get("security.protocol") not in TLS_PROTOCOLS:
        return None
    given = values.get("ssl.context")
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise TlsSettingsError("ssl_context", f"expected an ssl.SSLContext, got {given!r}")
        return given
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca = values.get("ssl.ca.location")
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except FileNotFoundError:
            raise TlsSettingsError("ssl.ca.location", f"cannot read {ca}") from None
        except (ssl.SSLError, OSError) as error:
            raise TlsSettingsError(
                "ssl.ca.location", f"{ca} holds no usable PEM certificates: {error}"
            ) from None
    verify = values.get("enable.ssl.certificate.verification", True)
    context.check_hostname = verify and values.get("ssl.endpoint.identification.algorithm") in (
        None,
        "https",
    )
    if not verify:
        context.verify_mode = ssl.CERT_NONE
    certificate = values.get("ssl.certificate.location")
    key = values.get("ssl.key.location")
    if key and not certificate:  # a certificate file may hold its key too
        raise TlsSettingsError(
            "ssl.key.location", "a client key needs ssl.certificate.location too"
        )
    if certificate:
        password = values.get("ssl.key.password")
        try:
            context.load_cert_chain(certificate, key or None, password=password)
        except FileNotFoundError as error:
            raise TlsSettingsError(
                "ssl.certificate.location", f"cannot read {error.filename or certificate}"
            ) from None
        except (ssl.SSLError, OSError) as error:
            raise TlsSettingsError(
                "ssl.key.location",
                f"cannot load the client certificate and key (wrong ssl.key.password?): "
                f"{getattr(error, 'reason', None) or error}",
            ) from None
    return context
