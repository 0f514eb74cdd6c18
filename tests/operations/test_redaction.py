"""The one scrubber: a registered secret is removed in every form a provider might echo it in."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from operations.infrastructure.redaction import REDACTED, redact, redact_bytes, register_secret, scrub

# "/", "+" and "=" make the URL-encoded, JSON-escaped and base64 forms differ from the value.
SECRET = "tok/en+Secret=42-9f8e7d"
HEADER = f"Bearer {SECRET}"


@pytest.fixture(autouse=True)
def _registered() -> None:
    register_secret(SECRET)
    register_secret(HEADER)


def forms() -> list[str]:
    found = []
    for value in (SECRET, HEADER):
        raw = value.encode()
        found += [
            value,
            quote(value, safe=""),
            quote_plus(value),
            json.dumps(value)[1:-1].replace("/", "\\/"),
            base64.b64encode(raw).decode(),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        ]
    return found


@pytest.mark.parametrize("form", forms())
def test_every_form_is_scrubbed_from_text_and_bytes(form):
    text = f"the provider said: {form}."
    assert redact(text) == f"the provider said: {REDACTED}."
    assert redact_bytes(text.encode()) == f"the provider said: {REDACTED}.".encode()


def test_a_scrubbed_json_body_still_parses_and_keeps_everything_else():
    body = json.dumps({"state": "failed", "echo": HEADER, "b64": base64.b64encode(SECRET.encode()).decode()})
    assert json.loads(redact_bytes(body.encode())) == {"state": "failed", "echo": REDACTED, "b64": REDACTED}


def test_scrub_walks_keys_values_lists_and_tuples():
    value = {"ok": 1, SECRET: [f"x {SECRET}", ("y", HEADER)], "none": None}
    assert scrub(value) == {"ok": 1, REDACTED: [f"x {REDACTED}", ("y", REDACTED)], "none": None}


def test_short_values_are_not_registered():
    register_secret("abc")
    assert redact("abc abd") == "abc abd"
