"""The test users' claims and tampering modes, held in the OP process (set over the control endpoint)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

TAMPER_MODES = frozenset(
    {
        "",
        "aud",
        "iss",
        "expired",
        "nonce",
        "signature",
        "unknown_kid",
        "stale_auth_time",
        # auth_time left out unless the authorization request carried max_age (then OpenID Connect
        # Core 3.1.2.1 obliges the provider to send it), as some providers do.
        "no_auth_time",
        # A hostile provider's auth_time: not a time, or not a plausible one.
        "future_auth_time",
        "text_auth_time",
        "bool_auth_time",
        "nan_auth_time",
        "huge_auth_time",
    }
)


@dataclass
class TestUser:
    username: str
    email: str
    name: str
    groups: list[str] = field(default_factory=list)
    tamper: str = ""
    sub: str = ""
    preferred_username: str = ""  # the claim, when it is not the sign-in name (a hostile provider)
    email_verified: object = True  # the claim as sent (False, or a string, from some providers)


_lock = threading.Lock()
_users: dict[str, TestUser] = {}
# Users whose latest authorization request carried max_age (the token request that follows has none).
_max_age_asked: set[str] = set()


def put(user: TestUser) -> None:
    with _lock:
        _users[user.username] = user


def get(username: str) -> TestUser | None:
    with _lock:
        return _users.get(username)


def asked_max_age(username: str, *, asked: bool) -> None:
    with _lock:
        (_max_age_asked.add if asked else _max_age_asked.discard)(username)


def was_asked_max_age(username: str) -> bool:
    with _lock:
        return username in _max_age_asked
