"""A SASL listener's OAUTHBEARER validator, from Kafka's broker properties.

How this works and why: Kafka validates OAUTHBEARER tokens with the listener's server
callback handler (``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``).
Unset, it is the *unsecured* validator, for development and tests: tokens with ``alg:
none``, checked only for their claims, tuned by the JAAS options of the listener's
``OAuthBearerLoginModule`` (``unsecuredValidatorPrincipalClaimName``,
``unsecuredValidatorScopeClaimName``, ``unsecuredValidatorRequiredScope``,
``unsecuredValidatorAllowableClockSkewMs``). Set to Kafka's
``OAuthBearerValidatorCallbackHandler`` it checks signed JWTs against the identity
provider's JWKS at ``sasl.oauthbearer.jwks.endpoint.url`` (network/jwks.py keeps the
keys), with ``sasl.oauthbearer.expected.audience`` / ``expected.issuer`` /
``sub.claim.name`` / ``scope.claim.name`` / ``clock.skew.seconds``. A JWKS URL without
the handler class also selects signed tokens: a URL is never silently ignored for the
unsecured validator. Nothing is fetched here; the first exchange fetches the keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from odradek.network.jwks import JwksSettings, JwksSource
from odradek.security.jaas import JaasError, parse_broker_jaas
from odradek.security.jwt import ClaimRules, ValidToken, validate_signed, validate_unsecured
from odradek.server.config import ConfigError

if TYPE_CHECKING:
    from odradek.server.config import BrokerConfig

OAUTH_LOGIN_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR_HANDLERS: Final = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
    }
)
UNSECURED_HANDLER: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"
)


@dataclass(frozen=True, slots=True)
class OAuthValidator:
    rules: ClaimRules
    jwks: JwksSource | None  # None: unsecured tokens

    def validate(self, token: str) -> ValidToken:
        """Raises security.jwt.TokenError; the keys must be current (``keys_for``)."""
        now = time.time()
        if self.jwks is None:
            return validate_unsecured(token, self.rules, now)
        return validate_signed(token, self.jwks.keys, self.rules, now)


def oauth_validator(
    config: BrokerConfig, listener: str, raw: Callable[[str], str | None]
) -> OAuthValidator:
    """The listener's validator; ConfigError for a setup that cannot work. ``raw(key)``
    reads a property with Kafka's listener/mechanism prefixes (sasl_settings.py)."""
    handler = raw("sasl.server.callback.handler.class")
    url = config["sasl.oauthbearer.jwks.endpoint.url"]
    if handler is not None and handler not in VALIDATOR_HANDLERS | {UNSECURED_HANDLER}:
        raise ConfigError(
            "sasl.server.callback.handler.class",
            f"listener {listener}: {handler} is not Kafka's OAUTHBEARER validator "
            "(OAuthBearerValidatorCallbackHandler with a JWKS, or the unsecured one)",
        )
    signed = handler in VALIDATOR_HANDLERS or (handler is None and url is not None)
    if not signed:
        return OAuthValidator(_unsecured_rules(listener, raw("sasl.jaas.config")), None)
    if url is None:
        raise ConfigError(
            "sasl.oauthbearer.jwks.endpoint.url",
            f"listener {listener}: the OAUTHBEARER validator needs the identity "
            "provider's JWKS URL",
        )
    if not url.startswith(("https://", "http://", "file:")):
        raise ConfigError(
            "sasl.oauthbearer.jwks.endpoint.url", f"{url!r} is not an http(s) or file URL"
        )
    rules = ClaimRules(
        principal_claim=config["sasl.oauthbearer.sub.claim.name"],
        scope_claim=config["sasl.oauthbearer.scope.claim.name"],
        clock_skew_s=float(config["sasl.oauthbearer.clock.skew.seconds"]),
        audiences=tuple(config["sasl.oauthbearer.expected.audience"] or ()),
        issuer=config["sasl.oauthbearer.expected.issuer"],
    )
    source = JwksSource(
        JwksSettings(
            url,
            refresh_ms=config["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
            retry_backoff_ms=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"],
            retry_backoff_max_ms=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"],
        )
    )
    return OAuthValidator(rules, source)


def _unsecured_rules(listener: str, jaas: str | None) -> ClaimRules:
    if not jaas:
        return ClaimRules()
    try:
        entry = parse_broker_jaas(jaas)
    except JaasError as error:
        raise ConfigError("sasl.jaas.config", f"listener {listener}: {error}") from None
    if entry.login_module != OAUTH_LOGIN_MODULE:
        raise ConfigError(
            "sasl.jaas.config",
            f"listener {listener}: OAUTHBEARER needs {OAUTH_LOGIN_MODULE}, "
            f"got {entry.login_module}",
        )
    options = entry.options
    skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0")
    try:
        skew_ms = int(skew)
    except ValueError:
        raise ConfigError(
            "sasl.jaas.config",
            f"listener {listener}: unsecuredValidatorAllowableClockSkewMs={skew!r} "
            "is not an integer",
        ) from None
    if skew_ms < 0:
        raise ConfigError(
            "sasl.jaas.config",
            f"listener {listener}: unsecuredValidatorAllowableClockSkewMs must not be negative",
        )
    required = options.get("unsecuredValidatorRequiredScope", "")
    return ClaimRules(
        principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub",
        scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope") or "scope",
        required_scopes=tuple(s.strip() for s in required.split(",") if s.strip()),
        clock_skew_s=skew_ms / 1000,
    )
