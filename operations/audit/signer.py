"""The signer process (`manage.py audit_checkpoint --loop`): a checkpoint every interval, a
heartbeat every tick, failures logged until fixed. What it signs and how: operations.audit.checkpoints."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from operations.audit import genuine, ledger
from operations.audit import verify as av
from operations.audit.checkpoints import CheckpointError, load_signing_key, sign_checkpoint
from operations.models import AuditCheckpoint, ProcessHeartbeat

logger = logging.getLogger("pollerdash.audit.signer")

# Checkpoint rows passed over that the heartbeat names (the log line says how many in all).
SKIPPED_REPORTED = 5


@dataclass(frozen=True)
class TickResult:
    signed: AuditCheckpoint | None
    error: str | None


class Signer:
    """`manage.py audit_checkpoint --loop`: a checkpoint every interval, a heartbeat every tick.

    A verification failure signs nothing, is logged at ERROR on every interval (so alerting on
    the log keeps firing) and shows on the heartbeat row and the system panel until fixed. Two
    kinds of tampering that leave the tree sound are reported the same way while it goes on
    signing: checkpoint rows that do not verify (passed over) and archive ledger rows the log does
    not record (operations.audit.ledger; they vouch for nothing, so nothing depends on them)."""

    def __init__(self, *, interval_s: int | None = None, clock: Callable[[], datetime] = timezone.now) -> None:
        self.interval = timedelta(seconds=interval_s or settings.AUDIT_CHECKPOINT_INTERVAL_S)
        self.clock = clock
        self.name = f"signer@{socket.gethostname()}:{os.getpid()}"
        self.started_at = clock()
        self.next_due: datetime | None = None
        self.last_error: str | None = None
        self.last: AuditCheckpoint | None = None
        self.skipped: list[str] = []  # checkpoint rows passed over on the last signing (the first few)
        self.skipped_count = 0
        self.ledger_error: str | None = None
        self.key = load_signing_key()  # fail at start-up, not a minute later

    def tick(self) -> TickResult | None:
        """Sign when due; always beat. Returns None when nothing was due."""
        now = self.clock()
        result = None
        if self.next_due is None or now >= self.next_due:
            result = self._sign(now)
            self.next_due = now + self.interval
        self._beat(now)
        return result

    def _sign(self, now: datetime) -> TickResult:
        skipped: list[genuine.Skipped] = []
        try:
            result = self._sign_checkpoint(now, skipped)
        finally:
            self._report(skipped)
        return result

    def _report(self, skipped: list[genuine.Skipped]) -> None:
        self.skipped = [str(row) for row in skipped[:SKIPPED_REPORTED]]
        self.skipped_count = len(skipped)
        if skipped:
            logger.error(
                "audit checkpoint rows that do not verify were passed over (forged?): %d, e.g. %s",
                len(skipped),
                "; ".join(self.skipped),
            )
        try:
            found = ledger.read(settings.AUDIT_LOG_NAME)
        except DatabaseError as exc:
            logger.error("audit archive ledger unreadable: %s", exc)
            close_old_connections()
            return
        self.ledger_error = found.report() if found.problems else None
        if self.ledger_error:
            logger.error("audit archive ledger tampered with: %s", self.ledger_error)

    def _sign_checkpoint(self, now: datetime, skipped: list[genuine.Skipped]) -> TickResult:
        try:
            checkpoint = sign_checkpoint(key=self.key, now=now, skipped=skipped)
        except CheckpointError as exc:
            self.last_error = str(exc)
            logger.error("audit checkpoint NOT signed: %s", exc)
            return TickResult(signed=None, error=self.last_error)
        except DatabaseError as exc:
            self.last_error = f"database error: {exc}"
            logger.error("audit checkpoint NOT signed: %s", self.last_error)
            close_old_connections()
            return TickResult(signed=None, error=self.last_error)
        except Exception as exc:
            self.last_error = f"unexpected {type(exc).__name__}: {exc}"
            logger.exception("audit checkpoint NOT signed")
            return TickResult(signed=None, error=self.last_error)
        self.last_error = None
        self.last = checkpoint
        logger.info("audit checkpoint signed: size %s", checkpoint.size)
        return TickResult(signed=checkpoint, error=None)

    def _beat(self, now: datetime) -> None:
        info = {
            "ok": self.last_error is None,
            "error": self.last_error,
            "interval_s": int(self.interval.total_seconds()),
            "last_size": self.last.size if self.last else None,
            "last_signed_at": av.format_time(self.last.signed_at) if self.last else None,
            "skipped_checkpoints": self.skipped,
            "skipped_count": self.skipped_count,
            "ledger": self.ledger_error,
        }
        try:
            ProcessHeartbeat.objects.update_or_create(
                name=self.name,
                defaults={"kind": "signer", "last_seen_at": now, "info": info},
                create_defaults={"kind": "signer", "started_at": self.started_at, "last_seen_at": now, "info": info},
            )
        except DatabaseError as exc:
            logger.error("signer heartbeat failed: %s", exc)
            close_old_connections()

    def seconds_until_due(self) -> float:
        if self.next_due is None:
            return 0.0
        return max(0.0, (self.next_due - self.clock()).total_seconds())

    def run(self, *, sleep: Callable[[float], object], should_stop: Callable[[], bool]) -> None:
        while not should_stop():
            self.tick()
            # Wake at least every few seconds so a stop request and the heartbeat stay prompt.
            sleep(min(self.seconds_until_due(), 5.0) or 0.05)
