"""Every request pollerdash sends goes through operations.infrastructure.outbound, against real local servers: whatever
its purpose, a redirect is an answer (never followed), `identity` is asked and a compressed answer
never inflated, the answer is read up to the purpose's cap, and no proxy is taken from the
environment except for the identity provider (whose proxy was honoured before, and still is)."""

from __future__ import annotations

import pytest

from operations.infrastructure import outbound
from operations.infrastructure.outbound import Purpose
from tests.operations.test_http import Provider, provider  # the fixture, shared

__all__ = ["provider"]
BIG = Provider.ANSWERS["/big"][0]


def send(server: Provider, path: str, purpose: Purpose) -> outbound.Answer:
    return outbound.send(target=outbound.Target(purpose=purpose, url=f"{server.url}{path}"), method="GET")


@pytest.mark.parametrize("purpose", list(Purpose))
def test_a_redirect_is_an_answer_never_followed_and_identity_is_always_asked(provider, purpose):
    answer = send(provider, "/redirect", purpose)
    assert answer.http_status == 302 and [path for path, _ in provider.requests] == ["/redirect"]
    assert provider.requests[0][1]["accept-encoding"] == "identity"


@pytest.mark.parametrize("purpose", list(Purpose))
def test_a_compressed_answer_is_never_inflated(provider, purpose):
    answer = send(provider, "/gzip", purpose)
    assert answer.http_status == 200 and not answer.body
    if purpose in (Purpose.PROVIDER, Purpose.OIDC):
        assert answer.transport_error == "protocol_error"  # refused unread: an error for these
    else:
        assert answer.transport_error is None  # its status alone counts for a pager or a callback


@pytest.mark.parametrize(
    ("purpose", "body_bytes", "error"),
    [
        (Purpose.PROVIDER, None, None),  # 300 KiB is within POLL_BODY_CAP_BYTES (1 MiB)
        (Purpose.ONCALL, 64 * 1024, None),  # cut at the cap: a pager's answer is a few words
        (Purpose.SLACK_LOOKUP, 64 * 1024, None),
        (Purpose.OIDC, None, "body_too_large"),  # over 256 KiB: refused
        (Purpose.CALLBACK, 0, None),  # nothing read: the status says it all
    ],
)
def test_each_purpose_reads_the_answer_up_to_its_own_cap(provider, purpose, body_bytes, error):
    answer = send(provider, "/big", purpose)
    assert answer.http_status == 200 and answer.transport_error == error
    expected = len(BIG) if body_bytes is None and error is None else body_bytes
    if error is None:
        assert len(answer.body or b"") == expected


def test_the_provider_cap_is_its_setting_and_over_it_an_error(provider, settings):
    settings.POLL_BODY_CAP_BYTES = 100 * 1024
    answer = send(provider, "/big", Purpose.PROVIDER)
    assert answer.transport_error == "body_too_large" and answer.body is None


def test_no_proxy_from_the_environment_but_for_the_identity_provider(provider, monkeypatch):
    proxy = Provider()
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setattr(outbound, "_clients", {})  # clients made now, with this environment
        for purpose in Purpose:
            assert send(provider, "/plain", purpose).http_status == 200
        # Every purpose reached the server itself, the identity provider's request went through the proxy.
        assert len([path for path, _ in provider.requests]) == len(Purpose) - 1
        assert [path for path, _ in proxy.requests] == [f"{provider.url}/plain"]
    finally:
        proxy.stop()


def test_each_purpose_says_who_is_asking(provider):
    for purpose in Purpose:
        send(provider, "/plain", purpose)
    agents = [headers["user-agent"] for _, headers in provider.requests]
    assert agents == [
        "pollerdash/0.1 (+status poller)",
        "pollerdash-webhooks/1",
        "pollerdash-notify/1",
        "pollerdash-notify/1",
        "pollerdash-oidc/1",
    ]
