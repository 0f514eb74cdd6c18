"""The test users' claims and tampering modes, held in the OP process (set over the control endpoint)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

TAMPER_MODES = frozenset({"", "aud", "iss", "expired", "nonce", "signature", "unknown_kid", "stale_auth_time"})


@dataclass
class TestUser:
    username: str
    email: str
    name: str
    groups: list[str] = field(default_factory=list)
    tamper: str = ""
    sub: str = ""


_lock = threading.Lock()
_users: dict[str, TestUser] = {}


def put(user: TestUser) -> None:
    with _lock:
        _users[user.username] = user


def get(username: str) -> TestUser | None:
    with _lock:
        return _users.get(username)
