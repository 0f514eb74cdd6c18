"""Which usernames a single sign-on may create (accounts/usernames.py): pure, no database."""

from __future__ import annotations

import pytest

from accounts.usernames import problem


@pytest.mark.parametrize(
    "name", ["alice", "a", "bob.smith", "dana_v", "eve-2", "f+oncall@example.test", "9lives", "x" * 150]
)
def test_ordinary_names_pass(name: str) -> None:
    assert problem(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 151,
        "rеsponder",  # Cyrillic e
        "ｒｅｓｐｏｎｄｅｒ",  # fullwidth
        "resp\u200bonder",  # zero-width space
        "system:unattributed",
        "agent:report-bot",
        "a b",
        "a\nb",
        "a\tb",
        ".hidden",
        "-dash",
        "@at",
        "ünïcode",
    ],
)
def test_names_that_could_pass_for_another_are_refused(name: str) -> None:
    assert problem(name) is not None
