"""Origins, the operator's credential bindings and the watch key (operations/providers/origins.py, pure)."""

from __future__ import annotations

import pytest

from operations.providers.origins import (
    Origin,
    OriginError,
    origin_of,
    parse_allowed_origins,
    parse_credential_origins,
    watch_key,
)

ACME = Origin("https", "api.acme.example", 443)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.acme.example/v1/jobs/{job_id}",
        "https://API.ACME.EXAMPLE/v1/jobs/{job_id}",
        "HTTPS://Api.Acme.Example./v1/jobs/{job_id}",
        "https://api.acme.example:443/v1/jobs/{job_id}",
        "https://api.acme.example:00443",
        "https://api.acme.example?job={job_id}",
        "https://api.acme.example#x",
    ],
)
def test_one_origin_however_it_is_spelled(url):
    assert origin_of(url) == ACME
    assert str(origin_of(url)) == "https://api.acme.example"


def test_ports_and_addresses_are_part_of_the_origin_in_canonical_form():
    assert str(origin_of("http://127.0.0.1:8765/v1")) == "http://127.0.0.1:8765"
    assert origin_of("http://api.acme.example:80/") == Origin("http", "api.acme.example", 80)
    assert origin_of("http://api.acme.example:443/") != origin_of("https://api.acme.example/")
    assert str(origin_of("http://[0:0::1]:8080/x")) == "http://[::1]:8080"
    assert origin_of("https://[2001:DB8::1]/").host == "2001:db8::1"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://api.acme.example@evil.example/", "user info"),
        ("https://user:pw@api.acme.example/", "user info"),
        ("https://api%2eacme.example/", "percent-encode"),
        ("https://[fe80::1%25eth0]/", "percent-encode"),
        ("https://{job_id}.acme.example/", "{job_id} only in the path"),
        ("https://api.acme.example:{job_id}/", "{job_id} only in the path"),
        ("https://api.acme.example\\@evil.example/", "backslash"),
        ("https://api.acme.example /x", "plain ASCII"),
        ("https://bücher.example/", "plain ASCII"),
        ("ftp://api.acme.example/", "http:// or https://"),
        ("//api.acme.example/", "http:// or https://"),
        ("https:/api.acme.example/", "http:// or https://"),
        ("https:///x", "no plain host"),
        ("https://api.acme.example:0/", "port outside"),
        ("https://api.acme.example:65536/", "port outside"),
        ("https://api.acme.example:1:2/", "no plain host"),
        ("https://api..acme.example/", "no valid host name"),
        ("https://.acme.example/", "no valid host name"),
        ("https://api_acme.example/", "no plain host"),
        ("https://[1::2::3]/", "IPv6"),
    ],
)
def test_an_authority_that_is_not_a_plain_host_and_port_has_no_origin(url, why):
    with pytest.raises(OriginError, match=why.replace("{", r"\{").replace("}", r"\}")):
        origin_of(url)


def test_a_binding_lists_origins_per_credential_variable():
    bindings = parse_credential_origins(
        " PROVIDER_ACME_TOKEN = https://api.acme.example, https://eu.api.acme.example:8443/ ;"
        "PROVIDER_FAKE_TOKEN=http://127.0.0.1:8765;"
    )
    assert dict(bindings) == {
        "PROVIDER_ACME_TOKEN": frozenset({ACME, Origin("https", "eu.api.acme.example", 8443)}),
        "PROVIDER_FAKE_TOKEN": frozenset({Origin("http", "127.0.0.1", 8765)}),
    }
    assert dict(parse_credential_origins("")) == {}
    assert parse_allowed_origins(("http://127.0.0.1:8765", " ")) == frozenset({Origin("http", "127.0.0.1", 8765)})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("PROVIDER_A", "entry 1 is not NAME=origin"),
        ("PROVIDER_A=https://a.example;lower=https://b.example", "entry 2 is not NAME=origin"),
        ("PROVIDER_A=", "PROVIDER_A lists no origin"),
        ("PROVIDER_A=https://a.example/v1", "origin 1 of PROVIDER_A must be an origin only"),
        ("PROVIDER_A=https://a.example,https://x@b.example", "origin 2 of PROVIDER_A must not carry user info"),
        ("PROVIDER_A=https://a.example;PROVIDER_A=https://b.example", "binds PROVIDER_A twice"),
    ],
)
def test_a_binding_that_cannot_be_read_is_named_by_position_and_variable(value, message):
    with pytest.raises(ValueError, match=message):
        parse_credential_origins(value)


def test_a_refused_binding_never_quotes_what_was_written():
    pasted = "sk-live-0123456789abcdef"
    for value in (pasted, f"PROVIDER_A={pasted}", f"PROVIDER_A=https://a.example/{pasted}", f"{pasted}=x"):
        with pytest.raises(ValueError) as raised:
            parse_credential_origins(value)
        assert pasted not in str(raised.value)
    with pytest.raises(ValueError) as raised:
        parse_allowed_origins((f"https://a.example/{pasted}",))
    assert pasted not in str(raised.value) and "entry 1" in str(raised.value)


def test_the_watch_key_is_what_the_provider_sees():
    key = watch_key(
        credential_env="PROVIDER_FAKE_TOKEN", status_url="http://127.0.0.1:8765/v1/jobs/{job_id}", job_id="j"
    )
    # No account label or profile is part of it, nor the origin's spelling; the expanded URL is.
    assert key == watch_key(
        credential_env="PROVIDER_FAKE_TOKEN", status_url="HTTP://127.0.0.1:8765/v1/jobs/{job_id}", job_id="j"
    )
    assert key != watch_key(
        credential_env="PROVIDER_FAKE_TOKEN", status_url="http://127.0.0.1:8765/other/{job_id}?x=1", job_id="j"
    )
    others = {
        watch_key(credential_env="PROVIDER_OTHER_TOKEN", status_url="http://127.0.0.1:8765/v1/{job_id}", job_id="j"),
        watch_key(credential_env="PROVIDER_FAKE_TOKEN", status_url="http://127.0.0.1:8766/v1/{job_id}", job_id="j"),
        watch_key(credential_env="PROVIDER_FAKE_TOKEN", status_url="https://127.0.0.1:8765/v1/{job_id}", job_id="j"),
        watch_key(credential_env="PROVIDER_FAKE_TOKEN", status_url="http://127.0.0.1:8765/v1/{job_id}", job_id="J"),
        watch_key(credential_env="", status_url="http://127.0.0.1:8765/v1/{job_id}", job_id="j"),
    }
    assert key not in others and len(others) == 5
    assert len(key) == 64 and int(key, 16) >= 0
    # A row whose URL has no plain origin still gets a key of its own (it is never sent anyway).
    assert watch_key(credential_env="P", status_url="https://{job_id}.x/", job_id="j") != watch_key(
        credential_env="P", status_url="https://x/", job_id="j"
    )
