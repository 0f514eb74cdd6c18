"""Callback addresses: every IPv6 form that reaches a non-public IPv4 address, and every address
the IANA special-purpose registries call not globally reachable, is refused at registration (as
a literal) and at send time (as what a name resolves to)."""

from __future__ import annotations

import socket

import pytest

from operations.callbacks import targets as callbacks
from operations.callbacks.targets import callback_url_problem
from operations.models import CallbackDelivery, Operation
from tests.api.test_callbacks import deliver_due
from tests.support import job_id

pytestmark = pytest.mark.django_db

NOT_PUBLIC = [
    # IPv4-compatible (::a.b.c.d, deprecated): never routed, whatever the payload
    "::127.0.0.1",
    "::10.0.0.1",
    "::169.254.169.254",
    "::7f00:1",
    "::8.8.8.8",
    # IPv4-mapped with a non-public payload
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:100.64.0.1",
    # NAT64 well-known prefix with a non-public payload; the local-use prefix whatever the payload
    "64:ff9b::127.0.0.1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::192.168.1.1",
    "64:ff9b:1::a00:1",
    "64:ff9b:1::808:808",
    # 6to4 with a non-public embedded IPv4
    "2002:7f00:1::1",
    "2002:a00:1::",
    "2002:a9fe:a9fe::1",
    "2002:c0a8:101::1",
    # Teredo, benchmarking, ORCHID and the rest of the IETF protocol block
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "2001::1",
    "2001:2::1",
    "2001:10::1",
    "2001:20::1",
    # documentation
    "2001:db8::1",
    "3fff::1",
    # unspecified, loopback, discard-only, SRv6 SIDs, reserved space, ULA, link- and site-local, multicast
    "::",
    "::1",
    "100::1",
    "5f00::1",
    "4000::1",
    "fc00::1",
    "fd12:3456:789a::1",
    "fe80::1",
    "fec0::1",
    "ff02::1",
    "ff0e::1",
    # IPv4 special-purpose blocks
    "0.0.0.0",
    "192.0.0.8",
    "192.0.0.170",
    "192.88.99.1",
    "198.18.0.1",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
]
PUBLIC = ["2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]


def literal(address: str) -> str:
    return f"https://[{address}]/cb" if ":" in address else f"https://{address}/cb"


def resolving_to(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sockaddr = (address, 443, 0, 0) if family == socket.AF_INET6 else (address, 443)
    monkeypatch.setattr(
        callbacks.socket, "getaddrinfo", lambda *a, **k: [(family, socket.SOCK_STREAM, 6, "", sockaddr)]
    )


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_non_public_address_is_refused_as_a_literal(address):
    problem = callback_url_problem(literal(address))
    assert problem is not None and "non-public address" in problem, (address, problem)


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_name_resolving_to_a_non_public_address_is_not_sent(monkeypatch, address):
    resolving_to(monkeypatch, address)
    with pytest.raises(callbacks.TargetRefused, match="non-public address"):
        callbacks.resolve_target("https://hooks.example.com/cb")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_and_forms_embedding_a_public_ipv4_are_accepted(monkeypatch, address):
    assert callback_url_problem(literal(address)) is None
    resolving_to(monkeypatch, address)
    assert callbacks.resolve_target("https://hooks.example.com/cb").extensions == {"sni_hostname": "hooks.example.com"}


def test_a_zone_index_is_refused():
    assert callback_url_problem("https://[fe80::1%25eth0]/cb") is not None


def test_an_ipv4_compatible_loopback_is_refused_at_registration_and_at_send_time(
    api, profile, register, drive, monkeypatch
):
    refused = api.register(
        provider=profile.slug, provider_job_id=job_id("slow_success"), callback={"url": "https://[::127.0.0.1]/cb"}
    )
    assert refused.status_code == 422 and refused.json()["code"] == "callback_url_rejected"
    created = register("slow_success", params={"polls": 1}, callback={"url": "https://hooks.example.com/cb"})
    drive(Operation.objects.get(pk=created["id"]))
    resolving_to(monkeypatch, "::127.0.0.1")
    assert deliver_due() == ["retry"]
    delivery = CallbackDelivery.objects.get(operation_id=created["id"])
    assert delivery.attempts == 1 and "non-public address (::7f00:1)" in delivery.last_error
