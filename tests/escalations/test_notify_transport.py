"""The notification channels' one POST against a real local server: uncompressed answers only, so
a receiver (or whoever answers for its URL) cannot make a worker inflate a bomb."""

from __future__ import annotations

import tracemalloc

from escalations.oncall import transport
from tests.operations.test_http import PLAIN, provider  # noqa: F401 - the fixture, shared

__all__ = ["provider"]


def test_a_compressed_answer_keeps_its_status_but_is_never_inflated(provider, settings):  # noqa: F811
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    tracemalloc.start()
    try:
        answer = transport.post(f"{provider.url}/gzip-gzip", body=b"{}", headers={})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert (answer.status, answer.body, answer.transport_error) == (200, b"", "")
    assert provider.accept_encodings == ["identity"]


def test_a_plain_answer_is_read(provider):  # noqa: F811
    answer = transport.post(f"{provider.url}/plain", body=b"{}", headers={"Content-Type": "application/json"})
    assert (answer.status, answer.body) == (200, PLAIN)
