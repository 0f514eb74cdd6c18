"""The identity provider's discovery document (<issuer>/.well-known/openid-configuration), read on
first use and cached for OIDC_DISCOVERY_TTL_S.

mozilla-django-oidc wants each endpoint as a setting; with this, operators set only OIDC_ISSUER
and the endpoints and key set follow the provider (an explicit OIDC_OP_* setting still wins).
Nothing here runs at start-up or for password sign-ins: an unreachable provider costs single
sign-on only.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

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
MAX_DOCUMENT_BYTES = 256 * 1024


class DiscoveryError(Exception):
    """The discovery document could not be read, or does not describe OIDC_ISSUER."""


_lock = threading.Lock()
_cache: dict[str, tuple[float, dict]] = {}


def unreachable(exc: Exception) -> str:
    """Why talking to the provider failed, in words a person acts on (not "[Errno 111] ..."), for
    httpx (discovery) and requests (the library's token, userinfo and key calls) alike."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException | requests.Timeout):
        return "it did not answer in time"
    text = str(exc).lower()
    if "name or service not known" in text or "nodename nor servname" in text or "name resolution" in text:
        return "its host name does not resolve"
    if "certificate" in text or "ssl" in text or "tls" in text:
        return "its TLS certificate was refused"
    if "refused" in text or "errno 111" in text:
        return "nothing accepts connections at that address (connection refused): is the provider running?"
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"it answered HTTP {exc.response.status_code}"
    return f"the connection failed ({type(exc).__name__})"


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
    url = f"{issuer}/.well-known/openid-configuration"
    connect_s, read_s = settings.OIDC_TIMEOUT
    # The rule of every answer pollerdash reads (operations/http.py): uncompressed only — httpx
    # inflates each network chunk whole before any cap applies — and at most MAX_DOCUMENT_BYTES.
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    try:
        with httpx.stream(
            "GET", url, headers=headers, timeout=httpx.Timeout(read_s, connect=connect_s), follow_redirects=False
        ) as response:
            response.raise_for_status()
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise DiscoveryError(
                    f"the discovery document of {issuer} came compressed ({encoding[:40]}), not as asked"
                )
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise DiscoveryError(
                        f"the discovery document of {issuer} is larger than {MAX_DOCUMENT_BYTES} bytes"
                    )
        doc = json.loads(body)
    except httpx.HTTPError as exc:
        raise DiscoveryError(f"could not read the discovery document of {issuer}: {unreachable(exc)}") from exc
    except ValueError as exc:
        raise DiscoveryError(f"the discovery document of {issuer} is not JSON") from exc
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
