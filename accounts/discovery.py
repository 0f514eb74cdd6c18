"""The identity provider over HTTP: its discovery document (<issuer>/.well-known/openid-configuration),
read on first use and cached for OIDC_DISCOVERY_TTL_S, and `fetch`, through which the sign-in's
token, key set and userinfo requests go too (accounts.oidc).

mozilla-django-oidc wants each endpoint as a setting; with this, operators set only OIDC_ISSUER
and the endpoints and key set follow the provider (an explicit OIDC_OP_* setting still wins).
Every request is operations.infrastructure.outbound's, purpose `oidc`: OIDC_TIMEOUT, no redirects, an
uncompressed answer of at most 256 KiB (a compressed or larger one is refused unread, so a hostile
or broken provider cannot make a web process inflate or hold an answer of any size). Nothing here
runs at start-up or for password sign-ins: an unreachable provider costs single sign-on only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from operations.infrastructure import outbound

# mozilla-django-oidc setting -> discovery document field
ENDPOINT_SETTINGS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_ENDPOINT": "end_session_endpoint",
}
# Endpoints a provider may leave out: RP-initiated logout (Google has none).
OPTIONAL = frozenset({"end_session_endpoint"})


class ProviderError(Exception):
    """The identity provider could not be reached, or answered something that cannot be used."""


class DiscoveryError(ProviderError):
    """The discovery document could not be read, or does not describe OIDC_ISSUER."""


_lock = threading.Lock()
_cache: dict[str, tuple[float, dict]] = {}


def forget() -> None:
    """Read the document again on next use (tests; a provider that moved its endpoints)."""
    with _lock:
        _cache.clear()


def document() -> dict:
    issuer = settings.OIDC_OP_ISSUER
    if not issuer:
        raise ImproperlyConfigured("OIDC_ISSUER is not set")
    now = time.monotonic()
    with _lock:
        cached = _cache.get(issuer)
        if cached and now - cached[0] < settings.OIDC_DISCOVERY_TTL_S:
            return cached[1]
    what = f"the discovery document of {issuer}"
    try:
        answer = fetch(method="GET", url=f"{issuer}/.well-known/openid-configuration", what=what)
        doc = json.loads(answer.body or b"")
    except ProviderError as exc:
        raise DiscoveryError(str(exc)) from exc
    except ValueError as exc:
        raise DiscoveryError(f"{what} is not JSON") from exc
    # OpenID Connect Discovery 1.0 section 4.3: the document must name exactly the issuer we asked.
    named = doc.get("issuer") if isinstance(doc, dict) else None
    if named != issuer:
        raise DiscoveryError(f"the discovery document names issuer {str(named)[:200]!r}, expected {issuer!r}")
    missing = [field for field in ENDPOINT_SETTINGS.values() if field not in OPTIONAL and not doc.get(field)]
    if missing:
        raise DiscoveryError(f"the discovery document of {issuer} has no {', '.join(missing)}")
    with _lock:
        _cache[issuer] = (now, doc)
    return doc


def setting(name: str, *default: object) -> object:
    """A mozilla-django-oidc setting, with the endpoints taken from discovery unless set explicitly."""
    if hasattr(settings, name):
        return getattr(settings, name)
    if name in ENDPOINT_SETTINGS:
        return document().get(ENDPOINT_SETTINGS[name]) or ""
    if default:
        return default[0]
    raise ImproperlyConfigured(f"Setting {name} not found")


def admit(url: str) -> outbound.Target:
    """The `oidc` purpose's address rule: an http(s) URL with a host. Where the provider is, is the
    operator's choice (OIDC_ISSUER, or what its discovery document names)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderError(f"the identity provider named an endpoint that is not an http(s) URL: {url[:200]!r}")
    return outbound.Target(purpose=outbound.Purpose.OIDC, url=url)


def fetch(
    *,
    method: str,
    url: str,
    what: str,
    form: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> outbound.Answer:
    """One request to the identity provider; ProviderError unless it answered 2xx, whole and uncompressed.
    `what` names the request in the error ("the token endpoint of <issuer>"); no error quotes a body."""
    answer = outbound.send(target=admit(url), method=method, form=form, headers=headers)
    if answer.transport_error == "body_too_large":
        raise ProviderError(f"{what} is larger than {outbound.rules(outbound.Purpose.OIDC).cap} bytes")
    if answer.transport_error == "protocol_error" and answer.transport_detail.endswith(f"({outbound.ENCODED})"):
        encoding = (answer.header("content-encoding") or "")[:40]
        raise ProviderError(f"{what} came compressed ({encoding}), not as asked")
    if answer.transport_error is not None or answer.http_status is None or not 200 <= answer.http_status < 300:
        raise ProviderError(f"could not read {what}: {unreachable(answer)}")
    return answer


# Why talking to the provider failed, in words a person acts on (not "[Errno 111] ...").
_UNREACHABLE = {
    "connect_error": "nothing accepts connections at that address (connection refused): is the provider running?",
    "dns_error": "its host name does not resolve",
    "tls_error": "its TLS certificate was refused",
    "timeout": "it did not answer in time",
    "connect_timeout": "it did not answer in time",
}


def unreachable(answer: outbound.Answer) -> str:
    """What went wrong with a request to the provider, for the page that says single sign-on failed."""
    if answer.transport_error is None:
        return f"it answered HTTP {answer.http_status}"
    words = _UNREACHABLE.get(answer.transport_error)
    return words or f"the connection failed ({answer.error_type or answer.transport_error})"
