"""Slots for the audit exports the dashboard streams (docs/DESIGN.md section 8, "Export").

A full or date-range export streams its whole selection (about 654 MB per million entries) and
holds one database connection until its last byte: without a cap, ten slow readers took every
connection of the web process's pool and every page waited, card decisions included. So such an
export streams only in one of AUDIT_EXPORT_WEB_CONCURRENT slots and one of the person's
AUDIT_EXPORT_WEB_CONCURRENT_PER_USER (0: no cap), held from before it is planned until its
response is closed: read to the end, or the reader gone.

On PostgreSQL a slot is a session advisory lock taken on the connection that streams, so the cap
holds across every uvicorn process and a dead process's slots go with its connections; the pool
drops whatever lock a connection still holds when it is handed back (pollerdash/env.py). On SQLite
(one machine, a trial) the slots are this process's alone. Either way a process also notes which
slots its own threads hold: a session may take its own advisory lock twice, and a thread that ended
without closing its response (a request cancelled while its view ran) holds nothing any more.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection

# Exports run for minutes: about when a slot may have come free, not a promise.
RETRY_AFTER_S = 60

_lock = threading.Lock()
_held: dict[str, threading.Thread] = {}


class ExportsBusy(Exception):
    """Every slot the export could take is streaming another: the message says which cap."""


def shared_key(index: int) -> str:
    return f"pollerdash/audit-export/slot/{index}"


def personal_key(*, user_id: int, index: int) -> str:
    return f"pollerdash/audit-export/user/{user_id}/{index}"


@dataclass
class Slot:
    keys: tuple[str, ...]
    owner: threading.Thread = field(default_factory=threading.current_thread)
    _released: bool = field(default=False, init=False)

    def release(self) -> None:
        """Free the slot: in the thread that took it, on the connection that holds its locks."""
        if self._released:
            return
        self._released = True
        try:
            if self.keys and connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    for key in self.keys:
                        cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
        except DatabaseError:
            pass  # the connection broke, and its session's locks ended with it
        finally:
            with _lock:
                for key in self.keys:
                    if _held.get(key) is self.owner:  # not a slot taken since from a thread that ended
                        del _held[key]


def take(*, user_id: int) -> Slot:
    """One of the person's slots and one shared slot, or ExportsBusy (nothing held then)."""
    keys: list[str] = []
    per_user = settings.AUDIT_EXPORT_WEB_CONCURRENT_PER_USER
    overall = settings.AUDIT_EXPORT_WEB_CONCURRENT
    try:
        if per_user:
            mine = _take_one([personal_key(user_id=user_id, index=i) for i in range(per_user)])
            if mine is None:
                raise ExportsBusy(
                    f"You already have {per_user} audit export{'s' if per_user > 1 else ''} streaming: "
                    f"try again when {'one ends' if per_user > 1 else 'it ends'}."
                )
            keys.append(mine)
        if overall:
            shared = _take_one([shared_key(i) for i in range(overall)])
            if shared is None:
                raise ExportsBusy(
                    f"{overall} audit export{'s are' if overall > 1 else ' is'} already streaming, the most "
                    "the dashboard streams at once: try again in a minute, or ask an operator for "
                    "manage.py audit_export on the server."
                )
            keys.append(shared)
    except BaseException:
        Slot(tuple(keys)).release()
        raise
    return Slot(tuple(keys))


def _take_one(keys: list[str]) -> str | None:
    me = threading.current_thread()
    for key in keys:
        with _lock:
            holder = _held.get(key)
            if holder is not None and holder.is_alive():
                continue
            _held[key] = me
        locked = False
        try:
            locked = _lock_in_database(key)
        finally:
            if not locked:
                with _lock:
                    _held.pop(key, None)
        if locked:
            return key
    return None


def _lock_in_database(key: str) -> bool:
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key])
        return bool(cursor.fetchone()[0])
