"""The one HTTP client pollerdash uses to talk to providers.

One keep-alive httpx.Client per process (created after fork, so django-q2 workers never share a
socket), with the bounds of DESIGN.md section 4: connect 5 s, read 10 s, the whole request 30 s
(enforced by shutting the socket down, so a slowloris body cannot stretch it), a 1 MiB body cap
read as a stream, and no redirects. Credentials are read from the environment at request time
and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from operations.redaction import register_secret

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
                limits=httpx.Limits(max_connections=50, max_keepalive_connections=20),
                follow_redirects=False,
                # Never route provider traffic through proxies picked up from the environment.
                trust_env=False,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            )
            _client_pid = os.getpid()
        return _client


def credential_headers(*, credential_env: str, auth_scheme: str) -> dict[str, str]:
    """The Authorization header for a profile, read from its environment variable now."""
    if not credential_env:
        return {}
    value = os.environ.get(credential_env, "")
    if not value:
        return {}
    register_secret(value)
    return {"Authorization": f"{auth_scheme} {value}".strip()}


def credential_fingerprint(*, credential_env: str) -> str:
    """A keyed fingerprint of the current credential: tells "changed" apart without storing it."""
    value = os.environ.get(credential_env, "") if credential_env else ""
    if not value:
        return ""
    return hmac.new(settings.SECRET_KEY.encode(), value.encode(), hashlib.sha256).hexdigest()[:16]


def _shutdown(sock: socket.socket | None, fired: threading.Event) -> None:
    fired.set()
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def send(*, method: str, url: str, headers: dict[str, str] | None = None) -> RawResponse:
    """Send one request and read at most the body cap, within the whole-request limit."""
    cap = settings.POLL_BODY_CAP_BYTES
    deadline = time.monotonic() + settings.POLL_HTTP_TOTAL_TIMEOUT_S
    fired = threading.Event()
    timer: threading.Timer | None = None
    status: int | None = None
    response_headers: dict[str, tuple[str, ...]] = {}
    try:
        with client().stream(method, url, headers=headers or {}) as response:
            status = response.status_code
            for name in {key.lower() for key in response.headers.keys()}:
                response_headers[name] = tuple(response.headers.get_list(name))
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), _shutdown, (sock, fired))
            timer.daemon = True
            timer.start()
            digest = hashlib.sha256()
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
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
                if time.monotonic() > deadline:
                    raise _TotalTimeout
            body = b"".join(chunks)
            return RawResponse(
                http_status=status,
                headers=response_headers,
                body=body,
                body_bytes=size,
                body_digest=digest.hexdigest(),
            )
    except _TotalTimeout:
        return _failure(status, response_headers, "timeout", _total_detail())
    except httpx.TimeoutException as exc:
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        return _failure(status, response_headers, kind, type(exc).__name__)
    except httpx.HTTPError as exc:
        if fired.is_set():
            return _failure(status, response_headers, "timeout", _total_detail())
        kind = "connect_error" if isinstance(exc, httpx.ConnectError) else "protocol_error"
        return _failure(status, response_headers, kind, f"{type(exc).__name__}: {str(exc)[:120]}")
    finally:
        if timer is not None:
            timer.cancel()


class _TotalTimeout(Exception):
    pass


def _total_detail() -> str:
    return f"whole request over {settings.POLL_HTTP_TOTAL_TIMEOUT_S:g} s"


def _failure(status: int | None, headers: dict[str, tuple[str, ...]], kind: str, detail: str) -> RawResponse:
    return RawResponse(http_status=status, headers=headers, transport_error=kind, transport_detail=detail)
