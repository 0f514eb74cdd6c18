from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operations.polling.signals import (
    parse_http_date,
    parse_poll_hint_seconds,
    parse_poll_hint_time,
    parse_retry_after,
    parse_rfc3339,
)

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "Tue, 01 Dec 2026 10:02:00 GMT",  # IMF-fixdate
        "Tuesday, 01-Dec-26 10:02:00 GMT",  # obsolete RFC 850
        "Tue Dec  1 10:02:00 2026",  # obsolete asctime
    ],
)
def test_it_reads_all_three_http_date_forms(value: str) -> None:
    hint = parse_retry_after([value], now=NOW, date_header=None)
    assert hint is not None and hint.delay_s == 120


def test_it_reads_delta_seconds() -> None:
    assert parse_retry_after(["120"], now=NOW, date_header=None).delay_s == 120


def test_it_measures_a_date_against_the_providers_own_clock() -> None:
    # The provider's clock is 5 minutes ahead of ours; it asked for 30 s, not 5.5 minutes.
    hint = parse_retry_after(["Tue, 01 Dec 2026 10:05:30 GMT"], now=NOW, date_header="Tue, 01 Dec 2026 10:05:00 GMT")
    assert hint is not None and hint.delay_s == 30


def test_a_past_date_means_no_wait_but_is_noted() -> None:
    hint = parse_retry_after(["Tue, 01 Dec 2026 09:59:00 GMT"], now=NOW, date_header=None)
    assert hint is not None and hint.delay_s == 0 and "past" in (hint.note or "")


@pytest.mark.parametrize("value", ["-1", "1.5", "+3", "soon", "120, 60", "Tue, 01 Dec 2026 25:00:00 GMT", "١٢٠"])
def test_it_ignores_malformed_retry_after_with_a_note(value: str) -> None:
    hint = parse_retry_after([value], now=NOW, date_header=None)
    assert hint is not None and hint.delay_s is None and hint.note


def test_two_retry_after_headers_are_ambiguous() -> None:
    hint = parse_retry_after(["120", "60"], now=NOW, date_header=None)
    assert hint is not None and hint.delay_s is None and "2 Retry-After" in (hint.note or "")


def test_surrounding_whitespace_is_not_part_of_the_value() -> None:
    assert parse_retry_after([" 120 "], now=NOW, date_header=None).delay_s == 120


def test_no_header_means_no_hint() -> None:
    assert parse_retry_after([], now=NOW, date_header=None) is None


def test_a_huge_value_does_not_overflow() -> None:
    hint = parse_retry_after(["9999999999999999999"], now=NOW, date_header=None)
    assert hint is not None and hint.delay_s is not None and hint.delay_s > 9e18


@given(st.text(max_size=40))
def test_retry_after_never_raises_and_never_goes_negative(value: str) -> None:
    hint = parse_retry_after([value], now=NOW, date_header=None)
    assert hint is not None
    assert hint.delay_s is None or hint.delay_s >= 0


def test_rfc850_two_digit_years_roll_back_a_century_when_far_ahead() -> None:
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now=NOW) == datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, 30.0), (1.5, 1.5), (0, 0.0)],
)
def test_valid_body_hints_are_used(value: float, expected: float) -> None:
    assert parse_poll_hint_seconds(value, absurd_s=604800).delay_s == expected


@pytest.mark.parametrize("value", [-5, 86_400_000, "120", True, float("nan"), float("inf"), [1]])
def test_invalid_body_hints_are_ignored_with_a_note(value: object) -> None:
    hint = parse_poll_hint_seconds(value, absurd_s=604800)
    assert hint is not None and hint.delay_s is None and hint.note


def test_a_next_check_time_becomes_a_delay() -> None:
    assert parse_poll_hint_time("2026-12-01T10:00:45Z", now=NOW, absurd_s=604800).delay_s == 45
    assert parse_poll_hint_time("2026-12-01T11:00:45+01:00", now=NOW, absurd_s=604800).delay_s == 45


@pytest.mark.parametrize("value", ["next tuesday", "2026-12-01T10:00:45", "2026-02-30T10:00:00Z", 5])
def test_unparsable_next_check_times_are_ignored(value: object) -> None:
    hint = parse_poll_hint_time(value, now=NOW, absurd_s=604800)
    assert hint is not None and hint.delay_s is None


def test_rfc3339_needs_an_offset() -> None:
    assert parse_rfc3339("2026-12-01T10:00:00") is None
    assert parse_rfc3339("2026-12-01T10:00:00.123456Z") == datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)
