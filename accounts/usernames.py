"""Which usernames a single sign-on may create: names nobody can mistake for another person or for
pollerdash itself.

Pages, reports and the audit story show people by username. A provider that may send any
`preferred_username` could otherwise create `Responder` beside `responder`, a Cyrillic look-alike,
`system:unattributed` (which reads like a system actor), or a name with a line break in it. The rule
is ASCII only — letters, digits and `. _ - @ +` (Django's own username characters, and every email
address's), starting with a letter or a digit, at most 150 characters — and no other account whose
name differs only in case. ASCII makes Unicode look-alikes, NFKC variants (fullwidth letters) and
invisible characters impossible by construction instead of by a confusables table.

The same rule holds in the admin (`clean_username`, used by its add and change forms): a name typed
there with a space before or after it, a control character or a case twin of another account is
refused with the reason, naming the field. An account named before the rule keeps its name while
it is edited; only a new or changed name is checked.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model

from operations.infrastructure import fastsql

MAX_LENGTH = 150
_CHARACTERS = re.compile(r"[A-Za-z0-9._@+-]+")
RULE = "letters, digits and . _ - @ + only (ASCII), starting with a letter or a digit"


def problem(name: str) -> str | None:
    """Why `name` cannot be a new account's username, or None. Pure."""
    if name != name.strip():
        return "a username has no leading or trailing spaces"
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        return f"a username has no control characters: {RULE}"
    if len(name) > MAX_LENGTH:
        return f"a username has at most {MAX_LENGTH} characters"
    if not _CHARACTERS.fullmatch(name):
        return f"a username has {RULE}"
    if not name[0].isalnum():
        return "a username must start with a letter or a digit"
    return None


def taken_as(name: str, *, except_pk: int | None = None) -> str | None:
    """The existing account (other than `except_pk`) whose username equals `name` in any case, if any."""
    others = get_user_model().objects.filter(username__iexact=name)
    if except_pk is not None:
        others = others.exclude(pk=except_pk)
    return others.values_list("username", flat=True).first()


def clean_username(name: str, *, current: str | None, pk: int | None) -> str:
    """`name` as a form saves it for the account `pk` (None: a new one) now named `current`, or a
    ValidationError saying why not. An unchanged name passes (accounts named before the rule)."""
    from django.core.exceptions import ValidationError

    if current is not None and name == current:
        return name
    why = problem(name)
    if why is None:
        twin = taken_as(name, except_pk=pk)
        if twin is not None:
            why = f"the account {twin} exists: a username may not differ from another only in case"
    if why is not None:
        raise ValidationError(f"Username: {why}.", code="invalid")
    return name


def serialize_new_accounts() -> None:
    """Inside the creating transaction: two sign-ins creating `Bob` and `bob` at once must not both
    find the name free. SQLite's write transactions are already serial (IMMEDIATE); on PostgreSQL
    one transaction-scoped advisory lock makes the check and the insert one step."""
    fastsql.named_lock("pollerdash:new-username")
