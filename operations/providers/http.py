"""A provider's requests: its credential read at request time, the destination it was checked for,
sent through the one outbound module (operations.infrastructure.outbound, purpose `provider`: connect 5 s, read
10 s, the whole request 30 s, a 1 MiB body cap read as a stream, no redirects, no content coding).

Credentials are read from the environment at request time and never stored; one that is not a
legal header value is never sent. A failed request is recorded as one word of TRANSPORT_ERRORS
with a fixed description, never as the exception's text (operations.infrastructure.outbound says why).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re

from django.conf import settings

from operations.cards.words import NOT_SENT_DESTINATION
from operations.infrastructure import outbound
from operations.infrastructure.outbound import DESTINATION_NOT_ALLOWED, INVALID_CREDENTIAL, TRANSPORT_ERRORS, Purpose
from operations.infrastructure.redaction import register_secret
from operations.providers.credential_names import credential_env_problem
from operations.providers.targets import Destination, still_bound

__all__ = ["TRANSPORT_ERRORS", "RawResponse", "send", "send_to_provider"]

# What the controller, the batch and the cancel read: outbound's answer.
RawResponse = outbound.Answer


class CredentialUnusable(Exception):
    """The profile's credential cannot be sent. The message is fixed and never quotes the value."""


# RFC 9110 field-value, as pollerdash sends it: visible ASCII with inner spaces or tabs. A PEM
# (line breaks), a NUL or non-ASCII text would make httpx refuse the request or quote the value.
_HEADER_VALUE = re.compile(r"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")


def credential_value(*, credential_env: str) -> str:
    """The provider credential named by a profile, read now: from NAME, or from the file NAME_FILE
    names (so a rotated credential file is picked up without restarting workers).

    A name that may not be a credential variable (operations/providers/credential_names.py) is refused here
    too, whatever the stored profile says: CredentialUnusable.
    """
    if not credential_env:
        return ""
    problem = credential_env_problem(name=credential_env)
    if problem is not None:
        raise CredentialUnusable(f"credential_env is refused: {problem}")
    path = os.environ.get(f"{credential_env}_FILE")
    if path:
        try:
            with open(path) as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return ""
    return os.environ.get(credential_env, "")


def credential_headers(*, credential_env: str, auth_scheme: str) -> dict[str, str]:
    """The Authorization header for a profile, read from its credential now.

    Raises CredentialUnusable for a refused variable name or a value that is not a legal header
    value; either way the value is registered with the scrubber first, so no text carries it.
    """
    value = credential_value(credential_env=credential_env)
    if not value:
        return {}
    header = f"{auth_scheme} {value}".strip()
    register_secret(value)
    register_secret(header)
    if not _HEADER_VALUE.fullmatch(value):
        raise CredentialUnusable(f"the credential in {credential_env} is not a valid header value")
    return {"Authorization": header}


def credential_fingerprint(*, credential_env: str) -> str:
    """A keyed fingerprint of the current credential: tells "changed" apart without storing it."""
    try:
        value = credential_value(credential_env=credential_env)
    except CredentialUnusable:
        return ""
    if not value:
        return ""
    return hmac.new(settings.SECRET_KEY.encode(), value.encode(), hashlib.sha256).hexdigest()[:16]


def send_to_provider(*, method: str, destination: Destination, auth_scheme: str) -> RawResponse:
    """Send one request with the credential its destination was checked for.

    `destination` comes from operations.providers.targets.check_destination, which the poll and the
    cancel call before charging; a credential whose destination is not bound (a Destination made
    any other way) and an unusable credential are not sent at all.
    """
    if not still_bound(destination):
        return RawResponse(transport_error=DESTINATION_NOT_ALLOWED, transport_detail=NOT_SENT_DESTINATION)
    if destination.unresolved:
        return RawResponse(transport_error="dns_error", transport_detail=TRANSPORT_ERRORS["dns_error"])
    try:
        headers = credential_headers(credential_env=destination.credential_env, auth_scheme=auth_scheme)
    except CredentialUnusable as exc:
        return RawResponse(transport_error=INVALID_CREDENTIAL, transport_detail=str(exc))
    return send(
        method=method,
        url=destination.url,
        headers={**destination.headers, **headers},
        extensions=dict(destination.extensions),
    )


def send(
    *, method: str, url: str, headers: dict[str, str] | None = None, extensions: dict[str, object] | None = None
) -> RawResponse:
    """Send one provider request (its destination checked by the caller) and read at most the body cap."""
    target = outbound.Target(purpose=Purpose.PROVIDER, url=url, headers=headers or {}, extensions=extensions or {})
    return outbound.send(target=target, method=method)
