"""Where the workers may send a provider request (docs/DESIGN.md section 2): checked when a profile is
validated (`destination_problem`: loadprofiles, the admin form, the start-up check) and again by
the worker before each status or cancel request is charged or sent (`check_destination`).

- **A profile with a credential** sends it only to an origin that PROVIDER_CREDENTIAL_ORIGINS binds
  to that variable; a variable without an entry is sent nowhere. The binding is the operator's
  environment, read by every process from its own: no admin form, profile row or other table can
  widen it, and a worker started without the binding refuses to send.
- **A profile without a credential** gets the callback address policy: https on a public address
  (port 443 or 8443), its name resolved when the request is sent and the request sent to the
  checked address — unless its origin is listed in PROVIDER_ALLOWED_ORIGINS (a provider on this
  host or network, such as the fake provider of the tests and the demo).

A refusal is a DestinationRefused whose `why` is one of the fixed sentences of
operations.cards.words (`destination_words`): nothing is sent and nothing is charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from operations.callbacks.targets import TargetRefused, Unresolvable, pinned, public_url_problem
from operations.cards.words import Refusal, destination_words
from operations.infrastructure.outbound import Purpose, Refused, Target
from operations.providers.origins import (
    DEFAULT_PORTS,
    Origin,
    OriginError,
    origin_of,
    parse_allowed_origins,
    parse_credential_origins,
)


@dataclass(frozen=True, kw_only=True)
class Destination(Target):
    """A provider URL checked for sending (the `provider` purpose's Target of operations.infrastructure.outbound),
    with the credential variable it was checked for."""

    purpose: Purpose = Purpose.PROVIDER
    credential_env: str
    # The name did not resolve when it was checked: the request is charged and recorded as the DNS
    # failure it is, and never resolved again unchecked.
    unresolved: bool = False


class DestinationRefused(Refused):
    """pollerdash will not send this request; `why` is a fixed sentence (words.destination_words)."""


def credential_bindings() -> Mapping[str, frozenset[Origin]]:
    """PROVIDER_CREDENTIAL_ORIGINS of this process (parsed once per value; checked at start-up)."""
    return parse_credential_origins(settings.PROVIDER_CREDENTIAL_ORIGINS)


def allowed_origins() -> frozenset[Origin]:
    return parse_allowed_origins(tuple(settings.PROVIDER_ALLOWED_ORIGINS))


@dataclass(frozen=True)
class _Verdict:
    origin: Origin | None
    refusal: Refusal | None = None
    detail: str = ""
    # No credential and not listed: judged public by name, its addresses are checked at send time.
    resolve: bool = False


def _judge(*, credential_env: str, url: str) -> _Verdict:
    try:
        origin = origin_of(url)
    except OriginError as exc:
        return _Verdict(origin=None, refusal=Refusal.NO_ORIGIN, detail=str(exc))
    if credential_env:
        bound = credential_bindings().get(credential_env)
        if bound is None:
            return _Verdict(origin=origin, refusal=Refusal.NO_BINDING)
        if origin not in bound:
            return _Verdict(origin=origin, refusal=Refusal.NOT_BOUND)
        return _Verdict(origin=origin)
    if origin in allowed_origins():
        return _Verdict(origin=origin)
    written_port = None if origin.port == DEFAULT_PORTS[origin.scheme] else origin.port
    problem = public_url_problem(scheme=origin.scheme, host=origin.host, port=written_port)
    if problem is not None:
        return _Verdict(origin=origin, refusal=Refusal.NOT_PUBLIC, detail=problem)
    return _Verdict(origin=origin, resolve=True)


def binding_problem(*, credential_env: str) -> str | None:
    """Why a credential variable is sent nowhere (it has no PROVIDER_CREDENTIAL_ORIGINS entry), or None."""
    if not credential_env or credential_env in credential_bindings():
        return None
    return (
        f"{credential_env} has no entry in PROVIDER_CREDENTIAL_ORIGINS: the operator binds each credential "
        "variable to the origins it may be sent to, in the environment of every pollerdash process "
        f"({credential_env}=https://api.provider.example)"
    )


def destination_problem(*, credential_env: str, url: str) -> str | None:
    """Why a profile may not send to `url` (by its credential variable, "" for none), or None.

    Judged from the URL and this process's settings, without DNS: for validating a profile.
    """
    verdict = _judge(credential_env=credential_env, url=url)
    if verdict.refusal is Refusal.NO_ORIGIN:
        return verdict.detail
    if verdict.refusal is Refusal.NO_BINDING:
        return binding_problem(credential_env=credential_env)
    if verdict.refusal is Refusal.NOT_BOUND:
        bound = ", ".join(sorted(str(origin) for origin in credential_bindings()[credential_env]))
        return (
            f"origin {verdict.origin} is not one PROVIDER_CREDENTIAL_ORIGINS binds {credential_env} to ({bound}); "
            "the operator's environment decides where a credential may go"
        )
    if verdict.refusal is Refusal.NOT_PUBLIC:
        return (
            f"{verdict.detail}: a profile without a credential may only reach public https addresses, "
            f"unless the operator lists origin {verdict.origin} in PROVIDER_ALLOWED_ORIGINS"
        )
    return None


def check_destination(*, credential_env: str, url: str) -> Destination:
    """The destination of one request, checked now; DestinationRefused (fixed words) when refused.

    Without a credential, the name is resolved here and the request pinned to the checked address.
    """
    verdict = _judge(credential_env=credential_env, url=url)
    origin = str(verdict.origin) if verdict.origin is not None else ""
    if verdict.refusal is not None:
        raise DestinationRefused(
            destination_words(refusal=verdict.refusal, credential_env=credential_env, origin=origin)
        )
    if not verdict.resolve:
        return Destination(url=url, credential_env=credential_env)
    assert verdict.origin is not None
    written_port = None if verdict.origin.port == DEFAULT_PORTS[verdict.origin.scheme] else verdict.origin.port
    try:
        target = pinned(url, host=verdict.origin.host, port=written_port, purpose=Purpose.PROVIDER)
    except Unresolvable:
        return Destination(url=url, credential_env=credential_env, unresolved=True)
    except TargetRefused:
        raise DestinationRefused(destination_words(refusal=Refusal.RESOLVES_PRIVATE, origin=origin)) from None
    return Destination(
        url=target.url, credential_env=credential_env, headers=target.headers, extensions=target.extensions
    )


def still_bound(destination: Destination) -> bool:
    """The last check before a credential leaves (http.send_to_provider): its URL's origin is bound."""
    if not destination.credential_env:
        return True
    return _judge(credential_env=destination.credential_env, url=destination.url).refusal is None
