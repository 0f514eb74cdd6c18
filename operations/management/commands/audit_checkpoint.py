"""`manage.py audit_checkpoint [--once|--loop]`: verify the newest audit segment, then sign a checkpoint.

--once (the default) signs one checkpoint and exits: 0 signed, 1 verification failed (nothing was
signed; the failure is on stderr), 2 no usable key or database. --loop is the `signer` process of
the Procfile: a checkpoint every AUDIT_CHECKPOINT_INTERVAL_S seconds even when the log is idle, a
heartbeat row (kind "signer"), and on a verification failure an ERROR log line every interval
while it keeps running, so alerting keeps firing until someone looks. SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from operations.audit import checkpoints
from operations.audit import verify as av
from operations.audit.signer import Signer
from operations.polls.heartbeat import forget_heartbeat


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be 1 to 86400 seconds, not {value}")
    return value


class Command(BaseCommand):
    help = "Verify the newest audit segment and sign a checkpoint: once, or every interval (--loop)."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="sign one checkpoint and exit (the default)")
        mode.add_argument("--loop", action="store_true", help="sign every AUDIT_CHECKPOINT_INTERVAL_S seconds")
        parser.add_argument("--interval", type=_seconds, default=None, help="seconds between checkpoints (--loop)")

    def handle(self, *args: object, loop: bool = False, interval: int | None = None, **options: object) -> None:
        if loop:
            self._loop(interval)
            return
        try:
            checkpoint = checkpoints.sign_checkpoint()
        except checkpoints.CheckpointRefused as exc:
            self.stderr.write(f"AUDIT CHECKPOINT NOT SIGNED: {exc}")
            raise CommandError("the audit chain failed verification; nothing was signed", returncode=1) from None
        except (checkpoints.CheckpointError, DatabaseError) as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write(
            f"signed checkpoint: size {checkpoint.size}, head {checkpoint.head_hash}, "
            f"time {av.format_time(checkpoint.signed_at)}"
        )

    def _loop(self, interval: int | None) -> None:
        try:
            signer = Signer(interval_s=interval)
        except checkpoints.CheckpointError as exc:
            raise CommandError(str(exc), returncode=2) from None
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        self.stdout.write(f"{signer.name}: signing a checkpoint every {int(signer.interval.total_seconds())} s")
        signer.run(sleep=stop.wait, should_stop=stop.is_set)
        try:
            forget_heartbeat(name=signer.name)
        except DatabaseError:
            self.stderr.write(f"{signer.name}: could not remove its heartbeat row on exit")
        self.stdout.write(f"{signer.name}: stopped")
