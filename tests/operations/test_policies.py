"""Escalation policies stored: loadpolicies and the admin form refuse the same policy with the same
problems and save nothing; a valid one is stored whole and audited; a profile names its policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from operations.models import AuditEntry, EscalationPolicy, PolicyTarget
from operations.notify import store
from tests.support import CANARY_PD_KEY

pytestmark = pytest.mark.django_db

# A routing key pasted where its variable's name belongs.
BAD = """
[[policy]]
name = "payments"
repeat_last_level = 11

[[policy.levels]]
wait_s = 0
targets = [{ user = "carol" }]

[[policy.levels]]
wait_s = 60
targets = [{ group = "nobody" }, { pagerduty = "ROUTING_KEY" }]
""".replace("ROUTING_KEY", CANARY_PD_KEY)

BAD_LEVELS = "[[levels]]" + BAD.split("[[policy.levels]]", 1)[1].replace("[[policy.levels]]", "[[levels]]")
EXPECTED = [
    "repeat_last_level: must be a whole number from 0 to 10",
    "levels[0].wait_s: must be whole seconds from 1 to 86400",
    "levels[0].targets[0].user: no user named 'carol'",
    "levels[1].targets[0].group: no group named 'nobody'",
    "levels[1].targets[1].pagerduty: must name an environment variable (ONCALL_ then A-Z, 0-9, _),"
    " not hold the secret itself",
]

GOOD = """
[[policy]]
name = "payments"
repeat_last_level = 2

[[policy.levels]]
wait_s = 300
targets = [{ user = "alice" }, { pagerduty = "ONCALL_PD_CANARY" }]

[[policy.levels]]
wait_s = 600
targets = [{ group = "oncall" }, { email = "team@example.test" }]
"""


@pytest.fixture
def people(db: None) -> None:
    get_user_model().objects.create_user("alice", "alice@example.test")
    Group.objects.create(name="oncall")


def test_loadpolicies_refuses_a_bad_file_whole_naming_every_problem_without_echoing_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(BAD)
    with pytest.raises(CommandError) as refused:
        call_command("loadpolicies", str(path))
    message = str(refused.value)
    assert f"{path}: 5 problem(s), nothing written" in message
    for problem in EXPECTED:
        assert f"policy #1 (payments): {problem}" in message
    assert CANARY_PD_KEY not in message
    assert not EscalationPolicy.objects.exists()


def test_the_admin_form_refuses_the_same_policy_with_the_same_problems(admin_client) -> None:
    response = admin_client.post(
        "/admin/operations/escalationpolicy/add/",
        {"name": "payments", "description": "", "repeat_last_level": "11", "levels": BAD_LEVELS},
    )
    assert response.status_code == 200
    page = re.sub(r"\s+", " ", response.content.decode())
    for problem in EXPECTED:
        assert problem.replace("'", "&#x27;") in page
    assert not EscalationPolicy.objects.exists()


def test_a_valid_file_is_stored_whole_audited_and_reloading_changes_nothing(people, tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(GOOD)
    call_command("loadpolicies", str(path), "--check")
    assert not EscalationPolicy.objects.exists()
    call_command("loadpolicies", str(path))
    row = EscalationPolicy.objects.get(name="payments")
    policy = store.policy_of(row)
    assert [(level.wait_s, [(t.kind, t.ref) for t in level.targets]) for level in policy.levels] == [
        (300, [("user", "alice"), ("pagerduty", "ONCALL_PD_CANARY")]),
        (600, [("group", "oncall"), ("email", "team@example.test")]),
    ]
    assert PolicyTarget.objects.get(kind="pagerduty").env == "ONCALL_PD_CANARY"
    [entry] = AuditEntry.objects.filter(type="policy.changed")
    assert b'"change":"created"' in bytes(entry.body)
    assert store.policies_save(policies=store.load_policies_file(path=path), actor={"kind": "t", "id": "t"}) == [
        store.SaveResult("payments", "unchanged")
    ]


def test_the_admin_saves_a_policy_through_the_store_and_shows_its_levels_as_toml(people, admin_client) -> None:
    levels = GOOD.split("[[policy.levels]]", 1)[1].replace("[[policy.levels]]", "[[levels]]")
    response = admin_client.post(
        "/admin/operations/escalationpolicy/add/",
        {
            "name": "payments",
            "description": "card payments",
            "repeat_last_level": "2",
            "is_default": "on",
            "levels": "[[levels]]" + levels,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    row = EscalationPolicy.objects.get(name="payments")
    assert row.is_default and row.description == "card payments"
    page = admin_client.get(f"/admin/operations/escalationpolicy/{row.pk}/change/").content.decode()
    assert "wait_s = 600" in page and "ONCALL_PD_CANARY" in page


def test_a_profile_names_an_existing_policy_and_a_named_policy_cannot_be_deleted(
    people, tmp_path: Path, make_profile
) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(GOOD)
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        "[[provider]]\nslug = 'acme'\nname = 'ACME'\nstatus_url = 'https://api.acme.test/jobs/{job_id}'\n"
        "job_id_pattern = '^[a-z0-9]{1,20}$'\nstate_field = 'state'\npending = ['running']\n"
        "success = ['done']\nescalation_policy = 'payments'\n"
    )
    with pytest.raises(CommandError, match="escalation_policy: no policy named 'payments'"):
        call_command("loadprofiles", str(profiles))
    call_command("loadpolicies", str(policies))
    call_command("loadprofiles", str(profiles))
    with pytest.raises(store.PoliciesInvalid, match="named by profile"):
        store.policy_delete(row=EscalationPolicy.objects.get(name="payments"), actor={"kind": "t", "id": "t"})


def test_which_policy_a_card_follows(people, make_profile, settings, tmp_path: Path) -> None:
    settings.NOTIFY_EMAILS, settings.NOTIFY_WEBHOOK_URL, settings.NOTIFY_REMINDER_S = [], "", 900
    profile = make_profile()
    assert store.policy_for(profile=profile) is None
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    implicit = store.policy_for(profile=profile)
    assert implicit.name == "settings" and implicit.repeat_last_level == 10 and implicit.levels[0].wait_s == 900
    path = tmp_path / "p.toml"
    path.write_text(GOOD + GOOD.replace('"payments"', '"other"'))
    call_command("loadpolicies", str(path))
    EscalationPolicy.objects.filter(name="other").update(is_default=True)
    assert store.policy_for(profile=profile).name == "other"
    settings.ESCALATION_DEFAULT_POLICY = "payments"
    assert store.policy_for(profile=profile).name == "payments"
    profile.escalation_policy = "other"
    assert store.policy_for(profile=profile).name == "other"
