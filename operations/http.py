"""The one HTTP client pollerdash uses to talk to providers.

One keep-alive httpx.Client per process (created after fork, so django-q2 workers never share a
socket), with the bounds of docs/DESIGN.md section 4: connect 5 s, read 10 s, the whole request 30 s,
a 1 MiB body cap read as a stream, no redirects, and no content coding: requests ask for
`Accept-Encoding: identity` and a compressed answer is a protocol error, never inflated.
Credentials are read from the environment at request time and never stored; one that is not a
legal header value is never sent.

A failed request is recorded as one word of TRANSPORT_ERRORS with a fixed description, never as
the exception's text: httpx's messages can quote the request (an illegal header value quoted in
a LocalProtocolError put 61 of 64 characters of a key on a card and into the audit chain).

The whole-request limit is enforced inside the network layer: every connect, read and write of
the request gets at most the time left before its deadline, so a provider that trickles its
headers or its body a byte at a time is cut off at 30 s, not kept alive by a per-read timeout.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

import httpcore
import httpx
from django.conf import settings

from operations.credential_names import credential_env_problem
from operations.decisions.words import NOT_SENT_DESTINATION
from operations.provider_targets import Destination, still_bound
from operations.redaction import redact, register_secret

logger = logging.getLogger(__name__)

USER_AGENT = "pollerdash/0.1 (+status poller)"

_client: httpx.Client | None = None
_client_pid: int | None = None
_client_lock = threading.Lock()


@dataclass(frozen=True)
class RawResponse:
    """What came back from one request, or the transport error that stood in for it."""

    http_status: int | None = None
    headers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    body: bytes | None = None
    body_bytes: int = 0
    body_digest: str = ""
    transport_error: str | None = None
    transport_detail: str = ""


INVALID_CREDENTIAL = "invalid_credential"
DESTINATION_NOT_ALLOWED = "destination_not_allowed"
# Every transport error a status check or cancel can record, with the only text stored about it.
TRANSPORT_ERRORS = {
    "timeout": "no complete answer within the time limits",
    "connect_timeout": "no connection within the connect time limit",
    "dns_error": "the provider's host name did not resolve",
    "connect_error": "the connection was refused or could not be made",
    "tls_error": "the TLS handshake or certificate check failed",
    "network_error": "the connection broke during the exchange",
    "protocol_error": "the answer was not valid HTTP",
    "invalid_request": "the request could not be built",
    "body_too_large": "the body is over the size cap",
    INVALID_CREDENTIAL: "the credential cannot be sent",
    DESTINATION_NOT_ALLOWED: NOT_SENT_DESTINATION,
}


_request_deadline = threading.local()


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """This I/O step's timeout, shortened to what is left of the current request's deadline."""
    deadline = getattr(_request_deadline, "at", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the whole-request time limit was reached")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: object, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            # Typing: httpcore hands our stream the SSL context it was given.
            self._inner.start_tls(ssl_context, server_hostname, _time_left(timeout, httpcore.ConnectTimeout))  # type: ignore[arg-type]
        )

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.NetworkStream:
        inner = super().connect_tcp(
            # Typing: httpcore hands our backend the socket options it was given.
            host,
            port,
            _time_left(timeout, httpcore.ConnectTimeout),
            local_address,
            socket_options,  # type: ignore[arg-type]
        )
        return _DeadlineStream(inner)


def _transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    # httpx offers no public way to choose httpcore's network backend: rebuild its connection pool
    # with the same settings and ours (httpx and httpcore are pinned in pyproject.toml).
    transport._pool = httpcore.ConnectionPool(
        ssl_context=transport._pool._ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_DeadlineBackend(),
    )
    return transport


def client() -> httpx.Client:
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = httpx.Client(
                timeout=httpx.Timeout(
                    connect=settings.POLL_HTTP_CONNECT_TIMEOUT_S,
                    read=settings.POLL_HTTP_READ_TIMEOUT_S,
                    write=settings.POLL_HTTP_READ_TIMEOUT_S,
                    pool=settings.POLL_HTTP_CONNECT_TIMEOUT_S,
                ),
                transport=_transport(httpx.Limits(max_connections=50, max_keepalive_connections=20)),
                follow_redirects=False,
                # Never route provider traffic through proxies picked up from the environment.
                trust_env=False,
                # No compressed bodies: httpx inflates each network chunk whole before the body cap
                # sees it, so 64 KiB of gzip became 64 MiB (gzip twice: gigabytes). See send().
                headers={"User-Agent": USER_AGENT, "Accept": "application/json", "Accept-Encoding": "identity"},
            )
            _client_pid = os.getpid()
        return _client


class CredentialUnusable(Exception):
    """The profile's credential cannot be sent. The message is fixed and never quotes the value."""


# RFC 9110 field-value, as pollerdash sends it: visible ASCII with inner spaces or tabs. A PEM
# (line breaks), a NUL or non-ASCII text would make httpx refuse the request or quote the value.
_HEADER_VALUE = re.compile(r"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")


def credential_value(*, credential_env: str) -> str:
    """The provider credential named by a profile, read now: from NAME, or from the file NAME_FILE
    names (so a rotated credential file is picked up without restarting workers).

    A name that may not be a credential variable (operations/credential_names.py) is refused here
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

    `destination` comes from operations.provider_targets.check_destination, which the poll and the
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
    """Send one request and read at most the body cap, within the whole-request limit."""
    cap = settings.POLL_BODY_CAP_BYTES
    _request_deadline.at = time.monotonic() + settings.POLL_HTTP_TOTAL_TIMEOUT_S
    status: int | None = None
    response_headers: dict[str, tuple[str, ...]] = {}
    try:
        with client().stream(method, url, headers=headers or {}, extensions=extensions or {}) as response:
            status = response.status_code
            for name in {key.lower() for key in response.headers.keys()}:
                response_headers[name] = tuple(response.headers.get_list(name))
            if _encoded(response_headers.get("content-encoding", ())):
                # We asked for identity; a provider that compresses anyway is refused unread rather
                # than inflated under a bound: no decoder runs on what a provider sends.
                return _failure(
                    status, response_headers, "protocol_error", f"{TRANSPORT_ERRORS['protocol_error']} ({_ENCODED})"
                )
            digest = hashlib.sha256()
            chunks: list[bytes] = []
            size = 0
            # Raw: the bytes as they came, so the cap counts what is held in memory.
            for chunk in response.iter_raw():
                size += len(chunk)
                if size > cap:
                    return RawResponse(
                        http_status=status,
                        headers=response_headers,
                        body_bytes=size,
                        transport_error="body_too_large",
                        transport_detail=f"body over the {cap} byte cap",
                    )
                digest.update(chunk)
                chunks.append(chunk)
            return RawResponse(
                http_status=status,
                headers=response_headers,
                body=b"".join(chunks),
                body_bytes=size,
                body_digest=digest.hexdigest(),
            )
    except httpx.TimeoutException as exc:
        if time.monotonic() >= _request_deadline.at:
            return _failure(status, response_headers, "timeout", _total_detail())
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        return _failure(status, response_headers, kind, f"{TRANSPORT_ERRORS[kind]} ({type(exc).__name__})")
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        kind = transport_error_kind(exc)
        # The exception's own text is for the operator's log only, scrubbed and cut.
        logger.info("provider request failed: %s (%s: %s)", kind, type(exc).__name__, redact(str(exc))[:300])
        return _failure(status, response_headers, kind, f"{TRANSPORT_ERRORS[kind]} ({type(exc).__name__})")
    finally:
        _request_deadline.at = None


_ENCODED = "Content-Encoding not requested"


def _encoded(values: tuple[str, ...]) -> bool:
    """Whether a Content-Encoding field names any coding but identity (one field may list several)."""
    return any(token.strip().lower() not in ("", "identity") for value in values for token in value.split(","))


def transport_error_kind(exc: BaseException) -> str:
    """The TRANSPORT_ERRORS word for an exception raised while sending, judged by its type only."""
    causes: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(causes) < 10:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(c, ssl.SSLError | ssl.CertificateError) for c in causes):
        return "tls_error"
    if isinstance(exc, httpx.ConnectError):
        return "dns_error" if any(isinstance(c, socket.gaierror) for c in causes) else "connect_error"
    if isinstance(exc, httpx.NetworkError):
        return "network_error"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
        return "protocol_error"
    return "invalid_request"


def _total_detail() -> str:
    return f"whole request over {settings.POLL_HTTP_TOTAL_TIMEOUT_S:g} s"


def _failure(status: int | None, headers: dict[str, tuple[str, ...]], kind: str, detail: str) -> RawResponse:
    return RawResponse(http_status=status, headers=headers, transport_error=kind, transport_detail=detail)
