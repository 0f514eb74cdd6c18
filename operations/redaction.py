"""Keeps provider credentials out of log output.

Credentials are read from the environment at request time (operations/http.py) and registered
here, so any log record that would carry one is scrubbed before it is written, whatever code path
produced it. A second rule removes anything that looks like an Authorization header value.
"""

from __future__ import annotations

import logging
import re
import threading

_lock = threading.Lock()
_secrets: set[str] = set()
_AUTH_VALUE = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)([A-Za-z]+\s+)?[^\s'\",}]+")
REDACTED = "[redacted]"


def register_secret(value: str) -> None:
    # Very short values would turn every log line into confetti; credentials are never that short.
    if value and len(value) >= 6:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _AUTH_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{REDACTED}", text)


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            cleaned_exc = redact(str(record.exc_info[1]))
            if cleaned_exc != str(record.exc_info[1]):
                # The traceback text would repeat the secret; keep the type and the scrubbed text.
                record.exc_text = f"{type(record.exc_info[1]).__name__}: {cleaned_exc}"
                record.exc_info = None
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
