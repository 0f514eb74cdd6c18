"""The one scrubber of secrets: provider credentials (and the webhook URL) never leave in text.

Credentials are read from the environment at request time (operations/providers/http.py) and registered
here by the process that sends them. From then on that process scrubs them from:

- provider bodies, before they are parsed (`redact_bytes`), so no value taken from a body - a
  state, a progress value, an error excerpt cut at a size cap - can carry even part of one;
- every text it is about to store or send (`scrub`, `redact`): results, provider errors, status
  check fields, escalation details, cancel responses;
- every log record (`RedactSecretsFilter`), whatever code path produced it.

A provider that echoes the request's Authorization header may do so encoded, so each secret is
scrubbed in the forms it travels in: as is, JSON-escaped, URL-encoded, base64 and base64url (with
and without padding), and as the whole header value ("Bearer <value>", registered separately).
A second rule removes anything that looks like an Authorization header value.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from typing import TypeVar
from urllib.parse import quote, quote_plus

_lock = threading.Lock()
# Each registered secret -> the forms it is scrubbed in.
_secrets: dict[str, frozenset[str]] = {}
# Every form of every secret, longest first (a longer form may contain a shorter one).
_forms: tuple[str, ...] = ()
_byte_forms: tuple[bytes, ...] = ()
_AUTH_VALUE = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)([A-Za-z]+\s+)?[^\s'\",}]+")
REDACTED = "[redacted]"
_REDACTED_BYTES = REDACTED.encode()
# Very short values would turn every text into confetti; credentials are never that short.
MIN_SECRET_CHARS = 6

T = TypeVar("T")


def _encoded_forms(value: str) -> frozenset[str]:
    raw = value.encode()
    standard = base64.b64encode(raw).decode()
    url_safe = base64.urlsafe_b64encode(raw).decode()
    json_escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    forms = {
        value,
        json_escaped,
        # Some JSON encoders (PHP's, by default) also escape "/".
        json_escaped.replace("/", "\\/"),
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        standard,
        standard.rstrip("="),
        url_safe,
        url_safe.rstrip("="),
    }
    return frozenset(form for form in forms if len(form) >= MIN_SECRET_CHARS)


def register_secret(value: str) -> None:
    """Scrub `value` (in every form it travels in) from this process's output from now on."""
    if not value or len(value) < MIN_SECRET_CHARS or value in _secrets:
        return
    global _forms, _byte_forms
    forms = _encoded_forms(value)
    with _lock:
        _secrets[value] = forms
        every = sorted({form for known in _secrets.values() for form in known}, key=len, reverse=True)
        _forms = tuple(every)
        _byte_forms = tuple(form.encode() for form in every)


def redact(text: str) -> str:
    """`text` without any registered secret or Authorization header value."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return _AUTH_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{REDACTED}", text)


def redact_bytes(body: bytes) -> bytes:
    """A provider body without any registered secret, before anything is taken from it."""
    for form in _byte_forms:
        if form in body:
            body = body.replace(form, _REDACTED_BYTES)
    return body


def scrub(value: T) -> T:
    """A JSON-like value (or a plain string) with every string in it redacted, keys included."""
    if isinstance(value, str):
        return redact(value)  # type: ignore[return-value]  # same type out as in (mypy does not tie T to an isinstance branch)
    if isinstance(value, dict):
        return {scrub(key): scrub(item) for key, item in value.items()}  # type: ignore[return-value]  # same type out as in (mypy does not tie T to an isinstance branch)
    if isinstance(value, list):
        return [scrub(item) for item in value]  # type: ignore[return-value]  # same type out as in (mypy does not tie T to an isinstance branch)
    if isinstance(value, tuple):
        return tuple(scrub(item) for item in value)  # type: ignore[return-value]  # same type out as in (mypy does not tie T to an isinstance branch)
    return value


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
