"""The demo's email backend: each message saved as an .eml file, one line printed per message.

Django's console backend prints every whole message (headers, both parts), which pushes the demo's
one-time logins off the screen within seconds; its file backend appends every message of a
connection to one .log file. This writes one openable ``.eml`` per message under EMAIL_FILE_PATH
(default ``var/mail``) and prints one readable line:

    mail 19:02:11 to oncall@example.invalid: [pollerdash] Decision needed: ... (var/mail/20261201-190211-3f9a.eml)

Usage (make demo): ``EMAIL_BACKEND=escalations.mailfiles.EmailBackend``.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from email.header import decode_header, make_header
from pathlib import Path
from typing import TextIO

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage


class EmailBackend(BaseEmailBackend):
    def __init__(
        self,
        *,
        file_path: str | None = None,
        stream: TextIO | None = None,
        fail_silently: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(fail_silently=fail_silently)
        self.directory = Path(file_path or settings.EMAIL_FILE_PATH)
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        if not email_messages:
            return 0
        sent = 0
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            for message in email_messages:
                try:
                    path = self._write(message)
                except OSError:
                    if not self.fail_silently:
                        raise
                    continue
                self.stream.write(self._line(message, path) + "\n")
                sent += 1
            self.stream.flush()
        return sent

    def _write(self, message: EmailMessage) -> Path:
        now = datetime.now(UTC)
        path = self.directory / f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}.eml"
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(message.message().as_bytes(linesep="\r\n"))
        # Atomic: a reader (a test, a mail viewer) never sees half a message.
        os.replace(temporary, path)
        return path

    @staticmethod
    def _line(message: EmailMessage, path: Path) -> str:
        subject = str(make_header(decode_header(message.message()["Subject"] or "")))
        recipients = ", ".join(message.recipients()) or "nobody"
        relative = os.path.relpath(path)
        shown = relative if not relative.startswith("..") else str(path)
        return f"mail {datetime.now(UTC):%H:%M:%S} to {recipients}: {' '.join(subject.split())} ({shown})"
