"""One bounded HTTP POST for the notification channels (PagerDuty, Slack webhooks, Web API, response URLs).

The same rules as the callback sender: no proxies from the environment, no redirects, split
timeouts so a receiver that never answers frees the worker after READ_TIMEOUT_S (well inside
django-q2's task timeout), and at most BODY_CAP bytes of the answer read - uncompressed only: it
asks for `identity`, and an answer compressed anyway keeps its status but no body (inflating it
before the cap could cost gigabytes for a few kilobytes sent). The URL may itself be a
secret (a Slack webhook): it is never put in an error text, and `url_problem` says what is wrong
with one in words that do not quote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from django.conf import settings

CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 5.0
BODY_CAP = 64 * 1024
USER_AGENT = "pollerdash-notify/1"


@dataclass(frozen=True)
class Answer:
    status: int | None
    headers: dict[str, str]
    body: bytes
    transport_error: str  # the exception's type name when there was no answer


def url_problem(url: str, *, what: str) -> str | None:
    """Why pollerdash will not POST to `url`: https only, unless its host:port is in NOTIFY_ALLOWED_HOSTS."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{what} is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{what} is not an http(s) URL"
    if parts.username or parts.password:
        return f"{what} carries a user name or password"
    listed = f"{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"
    if listed in settings.NOTIFY_ALLOWED_HOSTS:
        return None
    if parts.scheme != "https":
        return f"{what} must be https (or its host:port listed in NOTIFY_ALLOWED_HOSTS)"
    return None


def post(url: str, *, body: bytes, headers: Mapping[str, str]) -> Answer:
    timeout = httpx.Timeout(
        connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S, write=READ_TIMEOUT_S, pool=CONNECT_TIMEOUT_S
    )
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            sent = {"User-Agent": USER_AGENT, **headers, "Accept-Encoding": "identity"}
            with client.stream("POST", url, content=body, headers=sent) as response:
                chunks: list[bytes] = []
                size = 0
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding != "identity":
                    return Answer(response.status_code, dict(response.headers), b"", "")
                for chunk in response.iter_raw():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size >= BODY_CAP:
                        break
                return Answer(response.status_code, dict(response.headers), b"".join(chunks)[:BODY_CAP], "")
    except httpx.HTTPError as exc:
        return Answer(None, {}, b"", type(exc).__name__)
