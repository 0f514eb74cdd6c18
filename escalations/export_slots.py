"""Slots for the audit exports the dashboard streams (docs/DESIGN.md section 8, "Export").

A full or date-range export streams its whole selection (about 654 MB per million entries) and
holds one database connection until its last byte: without a cap, ten slow readers took every
connection of the web process's pool and every page waited, card decisions included. So such an
export streams only in one of AUDIT_EXPORT_WEB_CONCURRENT slots and one of the person's
AUDIT_EXPORT_WEB_CONCURRENT_PER_USER (0: no cap), held from before it is planned until its
response is closed: read to the end, or the reader gone.

A slot is a row (operations.models.ExportSlot) with a lease, so the cap holds across every uvicorn
process and through PgBouncer's transaction pooling, where a session advisory lock would stay with
whichever server connection the pooler lent (docs/deployment.md, "Topology"). The export renews
its lease while it streams; a process killed mid-export leaves rows whose lease lets them go
within AUDIT_EXPORT_SLOT_LEASE_S. A process also notes which slots its own threads hold: a thread
that ended without closing its response (a request cancelled while its view ran) holds nothing.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from operations.models import ExportSlot

# Exports run for minutes: about when a slot may have come free, not a promise.
RETRY_AFTER_S = 60

_lock = threading.Lock()
_held: dict[str, tuple[threading.Thread, str]] = {}


class ExportsBusy(Exception):
    """Every slot the export could take is streaming another: the message says which cap."""


def shared_key(index: int) -> str:
    return f"pollerdash/audit-export/slot/{index}"


def personal_key(*, user_id: int, index: int) -> str:
    return f"pollerdash/audit-export/user/{user_id}/{index}"


def _lease() -> timedelta:
    return timedelta(seconds=settings.AUDIT_EXPORT_SLOT_LEASE_S)


@dataclass
class Slot:
    keys: tuple[str, ...]
    holder: str
    owner: threading.Thread = field(default_factory=threading.current_thread)
    _released: bool = field(default=False, init=False)
    _renew_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._renew_at = time.monotonic() + settings.AUDIT_EXPORT_SLOT_LEASE_S / 3

    def renew(self) -> None:
        """Push the lease on; a slot lost meanwhile (the export stalled a whole lease) stays lost."""
        self._renew_at = time.monotonic() + settings.AUDIT_EXPORT_SLOT_LEASE_S / 3
        try:
            ExportSlot.objects.filter(key__in=self.keys, holder=self.holder).update(
                lease_until=timezone.now() + _lease()
            )
        except DatabaseError:
            pass  # the database is away: the export itself fails on its next read

    def kept(self, lines: Iterator[bytes]) -> Iterator[bytes]:
        """`lines`, renewing the lease while they stream."""
        for line in lines:
            if time.monotonic() >= self._renew_at:
                self.renew()
            yield line

    def release(self) -> None:
        """Free the slot (from any thread: the row names its holder)."""
        if self._released:
            return
        self._released = True
        try:
            if self.keys:
                ExportSlot.objects.filter(key__in=self.keys, holder=self.holder).delete()
        except DatabaseError:
            pass  # the lease lets it go
        finally:
            with _lock:
                for key in self.keys:
                    if _held.get(key, (None, ""))[1] == self.holder:
                        del _held[key]


def take(*, user_id: int) -> Slot:
    """One of the person's slots and one shared slot, or ExportsBusy (nothing held then)."""
    holder = f"{socket.gethostname()}/{os.getpid()}/{threading.get_ident()}/{uuid.uuid4().hex[:12]}"
    keys: list[str] = []
    per_user = settings.AUDIT_EXPORT_WEB_CONCURRENT_PER_USER
    overall = settings.AUDIT_EXPORT_WEB_CONCURRENT
    try:
        if per_user:
            mine = _take_one([personal_key(user_id=user_id, index=i) for i in range(per_user)], holder=holder)
            if mine is None:
                raise ExportsBusy(
                    f"You already have {per_user} audit export{'s' if per_user > 1 else ''} streaming: "
                    f"try again when {'one ends' if per_user > 1 else 'it ends'}."
                )
            keys.append(mine)
        if overall:
            shared = _take_one([shared_key(i) for i in range(overall)], holder=holder)
            if shared is None:
                raise ExportsBusy(
                    f"{overall} audit export{'s are' if overall > 1 else ' is'} already streaming, the most "
                    "the dashboard streams at once: try again in a minute, or ask an operator for "
                    "manage.py audit_export on the server."
                )
            keys.append(shared)
    except BaseException:
        Slot(tuple(keys), holder).release()
        raise
    return Slot(tuple(keys), holder)


def _take_one(keys: list[str], *, holder: str) -> str | None:
    for key in keys:
        with _lock:
            thread, previous = _held.get(key, (None, ""))
            if thread is not None and thread.is_alive():
                continue
        if _claim(key, holder=holder, abandoned=previous):
            with _lock:
                _held[key] = (threading.current_thread(), holder)
            return key
    return None


def _claim(key: str, *, holder: str, abandoned: str) -> bool:
    """The row for `key`, if no live export holds it: its lease ran out, or its holder is a thread
    of this process that ended (`abandoned`)."""
    now = timezone.now()
    with transaction.atomic():
        ExportSlot.objects.filter(key=key, lease_until__lte=now).delete()
        if abandoned:
            ExportSlot.objects.filter(key=key, holder=abandoned).delete()
        try:
            with transaction.atomic():
                ExportSlot.objects.create(key=key, holder=holder, lease_until=now + _lease())
        except IntegrityError:
            return False
    return True
