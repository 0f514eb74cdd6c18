"""The sign-in record a decision keeps (operations/cards/signin.py): pure, clock injected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from operations.cards.signin import OIDC, PASSWORD, SignIn, is_fresh

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_a_record_round_trips_with_every_key_present():
    oidc = SignIn(method=OIDC, at=NOW, issuer="https://id.example.com", subject="248289761001")
    assert oidc.as_record() == {
        "method": "oidc",
        "at": "2026-12-01T09:30:00.000000Z",
        "issuer": "https://id.example.com",
        "subject": "248289761001",
    }
    assert SignIn.from_record(oidc.as_record()) == oidc
    password = SignIn(method=PASSWORD, at=NOW, issuer="ignored")
    assert password.as_record()["issuer"] is None and password.as_record()["subject"] is None


def test_anything_that_is_not_a_sign_in_record_reads_as_none():
    for bad in (
        None,
        "password",
        {},
        {"method": "magic", "at": "2026-12-01T09:30:00Z"},
        {"method": "password"},
        {"method": "password", "at": "yesterday"},
        {"method": "password", "at": "2026-12-01T09:30:00"},
        {"method": "oidc", "at": "2026-12-01T09:30:00Z", "issuer": ["x"]},
    ):
        assert SignIn.from_record(bad) is None, bad


def test_fresh_means_within_the_window_and_not_from_the_future():
    window = timedelta(minutes=15)
    signed_in = SignIn(method=PASSWORD, at=NOW)
    assert is_fresh(signed_in, now=NOW + window, max_age=window)
    assert not is_fresh(signed_in, now=NOW + window + timedelta(seconds=1), max_age=window)
    assert is_fresh(signed_in, now=NOW - timedelta(seconds=60), max_age=window)  # clocks a minute apart
    assert not is_fresh(signed_in, now=NOW - timedelta(minutes=2), max_age=window)
    assert not is_fresh(None, now=NOW, max_age=window)


def test_a_single_sign_on_whose_time_the_provider_did_not_give_is_recorded_so_and_never_fresh():
    unknown = SignIn(method=OIDC, at=None, issuer="https://id.example.com", subject="248289761001")
    assert unknown.as_record()["at"] is None
    assert SignIn.from_record(unknown.as_record()) == unknown
    assert not is_fresh(unknown, now=NOW, max_age=timedelta(days=365))
    # A password sign-in always has a time: a record without one is not a sign-in.
    assert SignIn.from_record({"method": "password", "at": None, "issuer": None, "subject": None}) is None
