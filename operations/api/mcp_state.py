"""The MCP Tasks extension's `requestState`: an HMAC-sealed claim (agent, task, expiry, digest).

Every task-bearing answer (the CreateTaskResult, each `tasks/get`, each `notifications/tasks/status`)
carries a fresh state; the client echoes the latest one. Any web replica checks it with the
deployment's key alone (no task table, no session), and a state minted for another agent, for
another task, by another deployment (another key or SITE_URL), altered, or past its expiry is
refused exactly like an unknown task. The key is derived from SECRET_KEY with a purpose string
of its own, so it signs nothing else; SECRET_KEY_FALLBACKS keep states minted before a key
rotation valid until they expire.

The state is signed, not encrypted: it holds the caller's own agent number, the task id it already
knows, a time and a digest, none of which is secret to the caller.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.conf import settings

PURPOSE = b"pollerdash/mcp/task-request-state/v1"
VERSION = "s1"
# A client echoes what we minted; anything longer is not ours and is not worth parsing.
MAX_LENGTH = 512


@dataclass(frozen=True)
class Claims:
    agent_id: int
    task_id: str
    expires_at: int
    digest: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:
        raise ValueError("not the canonical encoding")
    return raw


@lru_cache(maxsize=8)
def _derived(secrets: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(hmac.new(secret.encode(), PURPOSE, hashlib.sha256).digest() for secret in secrets)


def _keys() -> tuple[bytes, ...]:
    """The signing key first, then one per fallback secret (verification only)."""
    return _derived((settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS))


def task_digest(*, task_id: str, created_at: datetime) -> str:
    """What a state is bound to: this deployment's task, by id and creation time."""
    material = f"tasks\n{settings.SITE_URL}\n{task_id}\n{created_at.isoformat()}".encode()
    return _b64(hashlib.sha256(material).digest()[:16])


def _mac(key: bytes, body: str) -> bytes:
    return hmac.new(key, f"{VERSION}.{body}".encode(), hashlib.sha256).digest()


def seal(*, agent_id: int, task_id: str, digest: str, expires_at: int) -> str:
    claims = {"a": agent_id, "t": task_id, "e": expires_at, "d": digest}
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return f"{VERSION}.{body}.{_b64(_mac(_keys()[0], body))}"


def unseal(token: object) -> Claims | None:
    """The claims of a state this deployment minted, unaltered; None for anything else."""
    if not isinstance(token, str) or len(token) > MAX_LENGTH:
        return None
    version, _, rest = token.partition(".")
    body, _, tag = rest.partition(".")
    if version != VERSION or not body or not tag:
        return None
    try:
        given = _unb64(tag)
        raw = _unb64(body)
    except (ValueError, binascii.Error):
        return None
    if not any(hmac.compare_digest(given, _mac(key, body)) for key in _keys()):
        return None
    try:
        claims = json.loads(raw)
        agent_id, task_id, expires_at, digest = claims["a"], claims["t"], claims["e"], claims["d"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (
        isinstance(agent_id, int)
        and isinstance(task_id, str)
        and isinstance(expires_at, int)
        and isinstance(digest, str)
    ):
        return None
    return Claims(agent_id=agent_id, task_id=task_id, expires_at=expires_at, digest=digest)


def accepts(token: object, *, agent_id: int, task_id: str, digest: str, now: float) -> bool:
    """Whether `token` is this deployment's unexpired state for this agent's task."""
    claims = unseal(token)
    return (
        claims is not None
        and claims.agent_id == agent_id
        and claims.task_id == task_id
        and hmac.compare_digest(claims.digest, digest)
        and now < claims.expires_at
    )
