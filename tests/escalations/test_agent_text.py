"""Agent text quoted in messages to people: links defanged, numbers and words left readable."""

from __future__ import annotations

import pytest

from escalations.agent_text import defang, quoted


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://evil.example/login", "hxxp://evil[.]example/login"),
        ("HTTPS://Evil.Example", "hxxpS://Evil[.]Example"),
        ("see www.evil.example now", "see www[.]evil[.]example now"),
        ("ftp://files.evil.example", "ftp[:]//files[.]evil[.]example"),
        ("mailto:boss@evil.example", "mailto[:]boss@evil[.]example"),
        ("javascript:alert(1)", "javascript[:]alert(1)"),
        ("call 10.0.0.1/admin", "call 10[.]0[.]0[.]1/admin"),
        ("bücher.example", "bücher[.]example"),
        ("retry 1.5 times, v2.0 of report", "retry 1.5 times, v2.0 of report"),
        ("URGENT: weekly report", "URGENT: weekly report"),
    ],
)
def test_links_are_defanged_and_the_rest_stays_readable(text: str, shown: str) -> None:
    assert defang(text) == shown


def test_quoted_is_one_capped_line_in_quotes_it_cannot_close() -> None:
    shown = quoted('a\nb\u2028c\t"d” “e' + "f" * 300, limit=40)
    assert shown.startswith("“a b c 'd' 'e") and shown.endswith("…”") and len(shown) == 42
    assert shown.count("“") == 1 and shown.count("”") == 1
