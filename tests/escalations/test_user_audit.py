"""Who decided stays as it was at decision time, and every rename or role change of a person is an
audit entry naming who made it (operations/people.py)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from operations.audit.story import story_line
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Decision
from operations.people import acting_as, user_change_record, user_facts
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


def body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


def user_entries(entry_type: str | None = None) -> list[dict]:
    entries = [json.loads(bytes(row)) for row in AuditEntry.objects.order_by("pk").values_list("body", flat=True)]
    return [e for e in entries if e["type"].startswith("user.") and (entry_type is None or e["type"] == entry_type)]


def story_text(entry_type: str) -> list[str]:
    """How the entries read where pollerdash tells the audit chain as sentences."""
    rows = AuditEntry.objects.filter(type=entry_type).order_by("pk").values_list("seq", "body")
    return [story_line(seq=seq, body=bytes(entry)).text for seq, entry in rows]


@pytest.fixture
def admin_client(client: Client) -> Client:
    root = get_user_model().objects.create_superuser(username="root", password="x", email="")
    client.force_login(root)
    return client


def admin_save(client: Client, user: object, **changes: object) -> None:
    """Post the admin's change form for `user` as a browser would, with some fields changed."""
    fields: dict[str, object] = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on" if user.is_active else "",
        "is_staff": "on" if user.is_staff else "",
        "is_superuser": "on" if user.is_superuser else "",
        "groups": [str(pk) for pk in user.groups.values_list("pk", flat=True)],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        **changes,
    }
    data = {key: value for key, value in fields.items() if value != ""}
    response = client.post(reverse("admin:auth_user_change", args=[user.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]


def test_a_rename_in_the_admin_leaves_every_record_of_the_decision_as_it_was(
    stopped, make_user, admin_client, signing_key
) -> None:
    responder2 = make_user("responder2")
    reader = Client()
    reader.force_login(make_user("vera", role="viewer"))
    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=responder2, option_id="close", card_version=esc.version
    )
    op = esc.operation_id

    admin_save(admin_client, responder2, username="someone-else")

    responder2.refresh_from_db()
    assert responder2.username == "someone-else"
    (renamed,) = user_entries("user.renamed")
    assert renamed["actor"] == {"kind": "user", "id": "root"}
    assert renamed["data"] == {"user_id": responder2.pk, "username": "someone-else", "old_username": "responder2"}
    assert story_text("user.renamed") == ["user:root renamed the account responder2 to someone-else"]
    for url in (reverse("decision_history_csv"), reverse("operation_decisions_csv", args=[op])):
        rows = list(csv.DictReader(io.StringIO(body(reader.get(url)))))
        assert [row["user"] for row in rows] == ["responder2"], url
    for url in (
        reverse("decision_history"),
        reverse("decision_history_report"),
        reverse("operation_detail", args=[op]),
        reverse("operation_report", args=[op]),
    ):
        page = body(reader.get(url))
        assert "responder2" in page and "someone-else" not in page, url
    # The history filter offers, and finds, the name the decision was taken under.
    assert op in body(reader.get(reverse("decision_history"), {"user": "responder2"}))
    assert op not in body(reader.get(reverse("decision_history"), {"user": "someone-else"}))


def test_the_first_acceptor_keeps_their_name_on_the_card_and_in_the_result(stopped, make_user, client) -> None:
    first, second = make_user("first-eyes"), make_user("second-eyes")
    esc = stopped("succeeded_no_result")
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=first,
        option_id="accept_output",
        card_version=esc.version,
        comment="ok",
    )
    first.username = "renamed-eyes"
    first.save()
    client.force_login(second)
    card = body(client.get(reverse("escalation_card", args=[esc.pk]), headers={"HX-Request": "true"}))
    assert "<strong>first-eyes</strong> accepted the output" in card
    esc.refresh_from_db()
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=second,
        option_id="accept_output",
        card_version=esc.version,
        comment="agreed",
    )
    esc.operation.refresh_from_db()
    assert esc.operation.result["accepted"]["by"] == ["first-eyes", "second-eyes"]


def test_role_changes_in_the_admin_are_entries_naming_the_admin(make_user, admin_client) -> None:
    viewer_group = Group.objects.get_or_create(name="viewer")[0]
    dana = make_user("dana")  # a responder
    admin_save(admin_client, dana, username="dana-v", groups=[str(viewer_group.pk)], is_staff="on")
    # One form, one change of each kind (not a remove, an add and a flag change apart).
    by_admin = [e for e in user_entries() if e["actor"] == {"kind": "user", "id": "root"}]
    assert [e["type"] for e in by_admin] == ["user.renamed", "user.roles_changed"]
    changed = by_admin[1]["data"]
    assert changed["username"] == "dana-v"
    assert changed["before"] == {"groups": ["responder"], "is_staff": False, "is_superuser": False}
    assert changed["after"] == {"groups": ["viewer"], "is_staff": True, "is_superuser": False}
    assert story_text("user.roles_changed")[-1] == "user:root changed the roles of dana-v: responder -> viewer, staff"
    dana.refresh_from_db()
    admin_save(admin_client, dana, is_active="")
    (deactivated,) = user_entries("user.deactivated")
    assert deactivated["actor"] == {"kind": "user", "id": "root"} and deactivated["data"]["username"] == "dana-v"


def test_adding_people_to_a_role_group_in_the_admin_or_renaming_it_is_recorded(make_user, admin_client) -> None:
    make_user("hal")  # a responder, until the group is renamed
    make_user("erin", role="viewer")
    add = admin_client.post(
        reverse("admin:auth_user_add"),
        {
            "username": "fresh",
            "password1": "pw-long-enough-1",
            "password2": "pw-long-enough-1",
            "usable_password": "true",
        },
    )
    assert add.status_code == 302
    (created,) = [e for e in user_entries("user.created") if e["data"]["username"] == "fresh"]
    assert created["actor"] == {"kind": "user", "id": "root"}
    responders = Group.objects.get(name="responder")
    renamed = admin_client.post(reverse("admin:auth_group_change", args=[responders.pk]), {"name": "responder-old"})
    assert renamed.status_code == 302
    (lost,) = [e for e in user_entries("user.roles_changed") if e["data"]["after"]["groups"] == ["responder-old"]]
    assert lost["actor"] == {"kind": "user", "id": "root"}
    assert (lost["data"]["username"], lost["data"]["before"]["groups"]) == ("hal", ["responder"])


def test_changes_outside_the_admin_are_recorded_too(make_user) -> None:
    responders = Group.objects.get_or_create(name="responder")[0]
    frank = make_user("frank", role=None)
    responders.user_set.add(frank)  # from the group's side
    (joined,) = [e for e in user_entries("user.roles_changed") if e["data"]["username"] == "frank"]
    assert joined["actor"] == {"kind": "system", "id": "unattributed"}
    assert (joined["data"]["before"]["groups"], joined["data"]["after"]["groups"]) == ([], ["responder"])
    # A sync from an identity provider names itself.
    with acting_as({"kind": "system", "id": "oidc"}):
        frank.groups.clear()
        frank.is_superuser = True
        frank.save()
    oidc = [e for e in user_entries() if e["actor"] == {"kind": "system", "id": "oidc"}]
    assert [e["type"] for e in oidc] == ["user.roles_changed", "user.roles_changed"]
    assert oidc[0]["data"]["after"]["groups"] == [] and oidc[1]["data"]["after"]["is_superuser"] is True
    # The service itself, for code that compares on its own.
    before = user_facts(frank)
    frank.is_active = False
    after = user_facts(frank)
    assert user_change_record(before=before, after=after, actor={"kind": "system", "id": "oidc"}) == 1
    assert user_entries()[-1]["type"] == "user.deactivated"


def test_a_login_writes_no_entry(make_user, client) -> None:
    make_user("gina")
    count = len(user_entries())
    assert client.login(username="gina", password="pw-gina")
    assert len(user_entries()) == count


def test_existing_decisions_are_backfilled_with_their_users_name(stopped, alice) -> None:
    from importlib import import_module

    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    esc = stopped()
    decision = escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    ).decision
    Decision.objects.filter(pk=decision.pk).update(username="")
    # The migration runs on the state of its time, when Decision still lived in the escalations app.
    executor = MigrationExecutor(connection)
    state = executor.loader.project_state(("escalations", "0005_decision_username"))
    import_module("escalations.migrations.0005_decision_username").backfill(state.apps, None)
    assert Decision.objects.get(pk=decision.pk).username == "alice"


def test_a_demo_login_is_one_entry_with_its_role_attributed_to_the_demo() -> None:
    from demo import seed as demo

    roles = demo.ensure_roles()
    assert demo.ensure_user(username="responder", group=roles["responder"])
    (created,) = user_entries()
    assert created["type"] == "user.created" and created["actor"] == {"kind": "system", "id": "demo"}
    assert (created["data"]["username"], created["data"]["groups"]) == ("responder", ["responder"])
