"""The admin applies the username rule of every other door (review F8): no case twin of an existing
account, no leading or trailing spaces, no control or non-ASCII characters; the form names the field
and nothing is written."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts.admin_forms import AccountCreationForm
from operations.models import AuditEntry

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def admin_client(client: Client) -> Client:
    root = User.objects.create_superuser(username="root", password="x", email="")
    client.force_login(root)
    User.objects.create_user(username="alice", password="pw-alice-long-enough")
    return client


def add(client: Client, username: str):
    return client.post(
        reverse("admin:auth_user_add"),
        {
            "username": username,
            "password1": "pw-long-enough-1",
            "password2": "pw-long-enough-1",
            "usable_password": "true",
        },
    )


def rename(client: Client, user: object, username: str):
    data = {
        "username": username,
        "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    return client.post(reverse("admin:auth_user_change", args=[user.pk]), data)


def field_errors(response) -> str:
    form = response.context["adminform"].form
    return " ".join(form.errors.get("username", []))


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Alice", "alice"),
        ("ALICE", "alice"),
        (" bob", "space"),
        ("bob ", "space"),
        ("bo\x01b", "letters, digits"),
        ("bo\x7fb", "letters, digits"),
        ("rеsponder", "letters, digits"),  # Cyrillic e
        ("system:unattributed", "letters, digits"),
    ],
)
def test_the_add_form_refuses_a_name_the_rule_refuses(admin_client, name, why) -> None:
    before = User.objects.count()
    entries_before = AuditEntry.objects.count()
    response = add(admin_client, name)
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        # Refused before the form by operations/infrastructure/control_characters.py, naming the field...
        assert response.status_code == 400 and "'username' holds a control character" in response.content.decode()
        # ...and by the form itself, for any other way in.
        form = AccountCreationForm(
            data={"username": name, "password1": "pw-long-enough-1", "password2": "pw-long-enough-1"}
        )
        assert not form.is_valid() and "control characters" in " ".join(form.errors["username"])
    else:
        assert response.status_code == 200
        errors = field_errors(response)
        assert errors and why in errors, errors
    assert User.objects.count() == before
    assert AuditEntry.objects.count() == entries_before


def test_a_rename_to_a_case_twin_or_with_spaces_is_refused(admin_client) -> None:
    bob = User.objects.create_user(username="bob", password="pw-bob-long-enough")
    for name in ("Alice", " bob2", "bob\t"):
        response = rename(admin_client, bob, name)
        assert response.status_code == 200 and field_errors(response), name
    assert User.objects.get(pk=bob.pk).username == "bob"


def test_ordinary_names_and_a_legacy_name_left_alone_still_save(admin_client) -> None:
    assert add(admin_client, "carol.smith").status_code == 302
    # An account named before the rule (here starting with a dash) can still be edited, its name unchanged.
    legacy = User.objects.create_user(username="-old", password="pw-old-long-enough")
    assert rename(admin_client, legacy, "-old").status_code == 302
    # Renaming to a case variant of itself only is not a twin of someone else.
    carol = User.objects.get(username="carol.smith")
    assert rename(admin_client, carol, "Carol.Smith").status_code == 302
