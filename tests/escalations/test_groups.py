"""Groups of cards (one outage) and bulk decisions over them, against real cards opened by the controller."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from escalations.selectors import inbox as inbox_selector
from operations.decisions import bulk, ownership
from operations.decisions.bulk import Member, decide_bulk
from operations.decisions.services import TooManyDecisions, escalation_decide
from operations.models import (
    AuditEntry,
    Authorization,
    BulkDecision,
    CardActivity,
    Decision,
    Escalation,
    Operation,
    PolicyRun,
)
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def notify(settings) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.NOTIFY_REMINDER_S = 900
    settings.SITE_URL = "https://pollerdash.example.test"


@pytest.fixture
def outage(stopped, make_profile):
    """Five cards of one provider account and reason; the fifth comes from a second integration on
    the same account whose profile offers only the 60-minute extension."""
    other = make_profile(slug="acme-other", account="acme", extension_options=[{"minutes": 60, "checks": 8}])
    main = make_profile(slug="acme-main", account="acme")
    cards = [stopped(provider=main, purpose=f"Export {n}") for n in range(4)]
    cards.append(stopped(provider=other, purpose="Export from the other integration"))
    return cards


def queued(func: str) -> list[tuple]:
    packages = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return [tuple(task["args"]) for task in packages if task["func"] == func]


def reload(esc: Escalation) -> Escalation:
    return Escalation.objects.get(pk=esc.pk)


def members(cards: list[Escalation]) -> list[Member]:
    return [Member(c.pk, reload(c).version) for c in cards]


def bulk_entries() -> list[dict]:
    bodies = AuditEntry.objects.filter(type="human.bulk_decision").order_by("pk").values_list("body", flat=True)
    return [json.loads(bytes(body))["data"] for body in bodies]


def test_cards_of_one_account_and_reason_within_the_window_form_one_group(outage, stopped, make_profile, clock) -> None:
    assert len({c.group_id for c in outage}) == 1 and outage[0].group_id is not None
    group = outage[0].group
    assert (group.account, group.reason, group.first_card_id) == ("acme", "deadline_exceeded", outage[0].pk)
    elsewhere = stopped(provider=make_profile(slug="beta", account="beta"))
    assert elsewhere.group_id != group.pk
    # Past the window a new group starts, even on the same account and reason.
    clock.move_to(group.opened_at + timedelta(minutes=11), tick=False)
    later = stopped(provider=outage[0].operation.provider)
    assert later.group_id not in (group.pk, elsewhere.group_id)


def test_a_group_whose_cards_are_all_decided_is_not_joined(stopped, alice) -> None:
    first = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=first.pk, user=alice, option_id="close", card_version=first.version
    )
    second = stopped()
    assert second.group_id != first.group_id and second.group.first_card_id == second.pk


def test_a_group_notifies_once_through_its_first_cards_policy(notify, outage, pump, mailoutbox) -> None:
    # One policy run for the outage: the group's first card's; its other cards start none.
    assert list(PolicyRun.objects.values_list("pk", flat=True)) == [outage[0].pk]
    assert pump() == ["sent"]
    [mail] = mailoutbox
    assert "5 operations: Deadline exceeded on acme" in mail.subject
    assert f"https://pollerdash.example.test/groups/{outage[0].group_id}/" in mail.body


def test_a_bulk_decision_applies_where_offered_and_lists_the_rest_as_refused(outage, alice) -> None:
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=outage[0].group_id,
        user=alice,
        option_id="extend:15m:4",
        members=members(outage),
        comment="provider status page says fixed",
        confirmed_count=5,
    )
    assert result.bulk.outcome == "applied" and (result.bulk.requested, result.bulk.applied) == (5, 4)
    assert [r["escalation_id"] for r in result.refused] == [outage[4].pk]
    assert result.refused[0]["why"] == "option not offered on this card"
    for card in outage[:4]:
        decision = Decision.objects.get(escalation=card, outcome="applied")
        assert decision.comment == "provider status page says fixed" and decision.bulk == result.bulk
        assert Authorization.objects.filter(operation=card.operation, kind="extension").count() == 1
        assert reload(card).state == "decided"
    refused = Decision.objects.get(escalation=outage[4])
    assert (refused.outcome, refused.bulk) == ("refused", result.bulk) and reload(outage[4]).state == "open"
    per_card = AuditEntry.objects.filter(type="human.decision", operation_id__in=[c.operation_id for c in outage])
    assert per_card.count() == 4
    [entry] = bulk_entries()
    assert entry["applied_escalation_ids"] == [c.pk for c in outage[:4]] and entry["requested"] == 5
    assert entry["refused"] == [{"escalation_id": outage[4].pk, "reason": "option not offered on this card"}]


@pytest.fixture
def authorization_fault():
    """The database refuses an Authorization for one operation (a fault injected at the database,
    as a full disk or a failed constraint would): `arm(operation_id)`."""
    from django.db import connection

    def arm(operation_id: str) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "CREATE FUNCTION test_refuse_authorization() RETURNS trigger AS $$ BEGIN "
                    f"IF NEW.operation_id = '{operation_id}' THEN RAISE EXCEPTION 'injected fault'; END IF; "
                    "RETURN NEW; END $$ LANGUAGE plpgsql"
                )
                cursor.execute(
                    "CREATE TRIGGER test_refuse_authorization BEFORE INSERT ON operations_authorization "
                    "FOR EACH ROW EXECUTE FUNCTION test_refuse_authorization()"
                )
            else:
                cursor.execute(
                    "CREATE TRIGGER test_refuse_authorization BEFORE INSERT ON operations_authorization "
                    f"WHEN NEW.operation_id = '{operation_id}' BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                )

    return arm


def test_a_fault_midway_through_a_bulk_decision_leaves_nothing_applied(outage, alice, authorization_fault) -> None:
    from django.db import DatabaseError

    before = {c.operation_id: (c.operation.status, c.operation.max_status_requests) for c in outage}
    entries = AuditEntry.objects.count()
    authorization_fault(outage[2].operation_id)
    with pytest.raises(DatabaseError):
        decide_bulk(
            sign_in=signed_in_now(),
            group_id=outage[0].group_id,
            user=alice,
            option_id="extend:15m:4",
            members=members(outage),
            comment="provider status page says fixed",
            confirmed_count=5,
        )
    # The first two members were applied before the fault: the bulk is written whole or not at all.
    assert [reload(c).state for c in outage] == ["open"] * 5
    assert not Decision.objects.exists() and not Authorization.objects.filter(kind="extension").exists()
    assert not BulkDecision.objects.exists() and AuditEntry.objects.count() == entries
    for card in outage:
        operation = type(card.operation).objects.get(pk=card.operation_id)
        assert (operation.status, operation.max_status_requests) == before[card.operation_id]


def test_the_confirmation_states_the_count_and_the_combined_cost(outage, alice) -> None:
    preview = bulk.preview_bulk(group=outage[0].group, members=members(outage), option_id="extend:15m:4", user=alice)
    assert preview.problems == [] and len(preview.offered) == 4
    assert preview.cost == "4 operations × 4 checks = 16 requests"
    assert [m.escalation.pk for m in preview.not_offered] == [outage[4].pk]
    close = bulk.preview_bulk(group=outage[0].group, members=members(outage), option_id="close", user=alice)
    assert close.cost == "5 operations: Close — stop watching" and close.option.confirm == "explicit"
    assert not Decision.objects.exists()  # a preview writes nothing


def assert_refused_whole(result: bulk.BulkResult, *reasons: str) -> None:
    assert result.refused_whole and result.bulk.outcome == "refused" and result.bulk.applied == 0
    whys = [r["why"] for r in result.refused]
    for reason in reasons:
        assert any(reason in why for why in whys), (reason, whys)
    assert not result.bulk.decisions.exists()
    assert bulk_entries()[-1]["outcome"] == "refused"


def test_a_bulk_naming_a_closed_card_a_card_of_another_group_or_one_held_by_someone_else_is_refused_whole(
    outage, stopped, make_profile, alice, bob
) -> None:
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=outage[0].pk, user=bob, option_id="close", card_version=outage[0].version
    )
    ownership.card_acknowledge(escalation_id=outage[1].pk, user=bob)
    stranger = stopped(provider=make_profile(slug="zeta", account="zeta"))
    named = [*members(outage), Member(stranger.pk, stranger.version), Member(999_999, 1)]
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=outage[0].group_id,
        user=alice,
        option_id="close",
        members=named,
        confirmed_count=len(named),
    )
    assert_refused_whole(result, "no longer open (decided)", "a card of another group", "held by bob", "no such card")
    assert {r["escalation_id"] for r in result.refused} == {outage[0].pk, outage[1].pk, stranger.pk, 999_999}
    assert all(reload(c).state == "open" for c in outage[1:])


def test_more_than_100_cards_or_an_unconfirmed_count_or_a_one_card_option_is_refused_whole(outage, alice) -> None:
    group_id = outage[0].group_id
    too_many = [Member(n, 1) for n in range(1, 102)]
    result = decide_bulk(
        sign_in=signed_in_now(), group_id=group_id, user=alice, option_id="close", members=too_many, confirmed_count=101
    )
    assert_refused_whole(result, "at most 100 cards per bulk decision (101 named)")
    unconfirmed = decide_bulk(
        sign_in=signed_in_now(),
        group_id=group_id,
        user=alice,
        option_id="close",
        members=members(outage),
        confirmed_count=4,
    )
    assert_refused_whole(unconfirmed, "the confirmation was for 4 cards, 5 were named")
    cancel = decide_bulk(
        sign_in=signed_in_now(),
        group_id=group_id,
        user=alice,
        option_id="cancel_at_provider",
        members=members(outage),
        confirmed_count=5,
    )
    assert_refused_whole(cancel, "decided one card at a time")
    assert BulkDecision.objects.filter(outcome="refused").count() == 3


def test_a_bulk_decision_counts_as_one_post_against_the_decision_limit(outage, alice, settings) -> None:
    settings.DECISIONS_PER_MINUTE = 2
    decide_bulk(
        sign_in=signed_in_now(),
        group_id=outage[0].group_id,
        user=alice,
        option_id="close",
        members=members(outage),
        confirmed_count=5,
    )
    assert Decision.objects.filter(outcome="applied").count() == 5
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=outage[0].pk, user=alice, option_id="close", card_version=1
    )  # refused: decided
    with pytest.raises(TooManyDecisions):
        decide_bulk(
            sign_in=signed_in_now(),
            group_id=outage[0].group_id,
            user=alice,
            option_id="close",
            members=[],
            confirmed_count=0,
        )


def test_acknowledging_a_group_takes_every_card_nobody_else_holds(outage, alice, bob) -> None:
    ownership.card_acknowledge(escalation_id=outage[2].pk, user=bob)
    count, others = ownership.acknowledge_group(group_id=outage[0].group_id, user=alice)
    assert (count, others) == (4, ["bob"])
    assert [reload(c).acknowledged_by.username for c in outage] == ["alice", "alice", "bob", "alice", "alice"]


# --- the dashboard ----------------------------------------------------------------------------------------


def test_the_inbox_shows_a_group_as_one_row_with_its_members(
    outage, stopped, make_profile, client: Client, alice
) -> None:
    single = stopped(provider=make_profile(slug="solo", account="solo"))
    client.force_login(alice)
    html = client.get(reverse("inbox")).content.decode()
    group_id = outage[0].group_id
    assert html.count('class="grouprow"') == 1 and f'id="group-{group_id}"' in html
    assert "5 operations: Deadline exceeded on acme" in html
    assert all(f"#card-{c.pk}" in html for c in outage)  # the five members are listed in the row
    assert re.findall(r'<article class="row" id="esc-(\d+)"', html) == [str(single.pk)]
    assert "6 cards (5 of them in groups)" in html
    # A filter that leaves one card of the group shows it as a plain row.
    ownership.card_acknowledge(escalation_id=outage[3].pk, user=alice)
    mine = client.get(reverse("inbox"), {"mine": "1"}).content.decode()
    assert 'class="grouprow"' not in mine and f'id="esc-{outage[3].pk}"' in mine


def test_the_group_page_reviews_then_applies_a_bulk_decision(outage, client: Client, alice) -> None:
    client.force_login(alice)
    url = reverse("card_group", args=[outage[0].group_id])
    page = client.get(url).content.decode()
    assert "5 operations: Deadline exceeded on acme" in page
    assert "Extend 15 min / 4 checks" in page and "offered by 4 of the 5 cards below" in page
    cards = [f"{c.pk}:{c.version}" for c in outage]
    bulk_url = reverse("card_group_bulk", args=[outage[0].group_id])
    review = client.post(bulk_url, {"step": "review", "option": "extend:15m:4", "card": cards, "comment": "fixed"})
    text = review.content.decode()
    assert review.status_code == 200 and "4 operations × 4 checks = 16 requests" in text
    assert "1 selected card does not offer it" in text and not Decision.objects.exists()
    applied = client.post(
        bulk_url,
        {"step": "apply", "option": "extend:15m:4", "card": cards, "comment": "fixed", "confirm_count": "5"},
    )
    assert applied.status_code == 303 and "?bulk=" in applied["Location"]
    shown = client.get(applied["Location"]).content.decode()
    assert "Applied “Extend 15 min / 4 checks” to 4 of 5 cards" in shown
    assert f"{outage[4].operation_id}</code>: option not offered on this card" in shown
    # The outage keeps its name once cards are decided; the list of bulk decisions says what each did.
    assert "<h1>5 operations: Deadline exceeded on acme</h1>" in shown and "1 open, 4 decided" in shown
    assert "“Extend 15 min / 4 checks” · 4 of 5 applied, 1 refused" in shown


def test_the_group_page_refuses_a_bad_bulk_whole_with_each_reason(
    outage, stopped, make_profile, client: Client, alice, bob
) -> None:
    ownership.card_acknowledge(escalation_id=outage[1].pk, user=bob)
    stranger = stopped(provider=make_profile(slug="zeta", account="zeta"))
    client.force_login(alice)
    cards = [f"{c.pk}:{c.version}" for c in [*outage, stranger]] + ["nonsense"]
    response = client.post(
        reverse("card_group_bulk", args=[outage[0].group_id]),
        {"step": "apply", "option": "close", "card": cards, "confirm_count": "6"},
    )
    text = response.content.decode()
    assert response.status_code == 422 and "Refused: nothing was applied" in text
    assert "held by bob" in text and f"{stranger.operation_id}</code>: a card of another group" in text
    assert "not a card: &#x27;nonsense&#x27;" in text
    assert not Decision.objects.exists() and BulkDecision.objects.get().outcome == "refused"
    too_many = client.post(
        reverse("card_group_bulk", args=[outage[0].group_id]),
        {"step": "review", "option": "close", "card": [str(n) for n in range(1, 102)]},
    )
    assert "at most 100 cards per bulk decision (101 named)" in too_many.content.decode()


def test_the_inbox_shows_and_filters_acceptances_waiting_for_a_second_responder(
    stopped, client: Client, alice, bob
) -> None:
    waiting = stopped("succeeded_no_result")
    stopped()
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=waiting.pk,
        user=bob,
        option_id="accept_output",
        card_version=waiting.version,
        comment="ok",
    )
    client.force_login(alice)
    html = client.get(reverse("inbox")).content.decode()
    assert "accepted by bob — needs a second responder" in html
    assert 'Needs a second responder <span class="n">1</span>' in html
    filtered = client.get(reverse("inbox"), {"awaiting": "1"}).content.decode()
    assert re.findall(r'<article class="row" id="esc-(\d+)"', filtered) == [str(waiting.pk)]


def test_a_card_that_joined_a_group_says_who_the_groups_page_reached(
    notify, outage, pump, client: Client, alice
) -> None:
    # Issue 25: the group's first card paged; its other cards said "nobody was notified".
    assert pump() == ["sent"]
    client.force_login(alice)
    joined = outage[1]
    page = client.get(f"/operations/{joined.operation_id}/").content.decode()
    assert "nobody was notified" not in page
    section = page[page.index('aria-label="Notifications"') :]
    section = section[: section.index("</section>")]
    assert f'href="/groups/{joined.group_id}/"' in section
    assert "told once for the whole group" in section
    assert "email to oncall@example.test" in section and 'data-notification-state="sent"' in section
    # The first card itself shows its own messages, as before.
    first = client.get(f"/operations/{outage[0].operation_id}/").content.decode()
    assert "email to oncall@example.test" in first and "told once for the whole group" not in first


def test_groups_and_single_cards_share_one_order_by_urgency_across_pages(
    stopped, make_profile, alice, settings, monkeypatch
) -> None:
    monkeypatch.setattr(inbox_selector, "PAGE_SIZE", 2)
    now = timezone.now()

    def due_in(card: Escalation, minutes: int) -> Escalation:
        Operation.objects.filter(pk=card.operation_id).update(business_deadline_at=now + timedelta(minutes=minutes))
        return card

    singles = {m: due_in(stopped(provider=make_profile(slug=f"single-{m}")), m) for m in (-15, 20, 40, 50)}
    soon = make_profile(slug="soon", account="soon")
    soon_group = [stopped(provider=soon), due_in(stopped(provider=soon), 30)]
    calm = make_profile(slug="calm", account="calm")
    calm_group = [stopped(provider=calm), stopped(provider=calm)]

    def page(number: int) -> list[str]:
        view = inbox_selector.inbox(user=alice, filters=inbox_selector.InboxFilters(), page=number)
        return [f"group {e.group.group_id}" if e.group else f"card {e.card.pk}" for e in view.entries]

    assert page(1) == [f"card {singles[-15].pk}", f"card {singles[20].pk}"]
    assert page(2) == [
        f"group {soon_group[0].group_id}",
        f"card {singles[40].pk}",
        f"card {singles[50].pk}",
        f"group {calm_group[0].group_id}",
    ]


# --- "held by someone else" is read under the card's lock --------------------------------------------------


def test_a_card_acknowledged_while_a_bulk_decision_is_checked_is_left_to_its_holder(
    outage, alice, bob, monkeypatch
) -> None:
    """bob acknowledges a card after alice's bulk request was checked but before its cards were
    locked: the bulk must not decide bob's card (the check is repeated under the lock)."""
    check = bulk._whole_problems

    def bob_acknowledges_meanwhile(**kwargs):
        problems = check(**kwargs)
        ownership.card_acknowledge(escalation_id=outage[1].pk, user=bob)
        return problems

    monkeypatch.setattr(bulk, "_whole_problems", bob_acknowledges_meanwhile)
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=outage[0].group_id,
        user=alice,
        option_id="close",
        members=members(outage),
        confirmed_count=5,
    )
    assert reload(outage[1]).state == "open" and reload(outage[1]).acknowledged_by == bob
    assert [r["escalation_id"] for r in result.refused] == [outage[1].pk]
    assert "held by bob" in result.refused[0]["why"]
    assert {reload(c).state for c in outage if c != outage[1]} == {"decided"}


def test_a_card_acknowledged_while_the_group_is_acknowledged_is_not_taken_over(outage, alice, bob, monkeypatch) -> None:
    from operations.lifecycle import ownership as lifecycle_ownership

    acknowledge = lifecycle_ownership.acknowledge
    raced: list[int] = []

    def bob_acknowledges_the_next_card_meanwhile(*, escalation_id, user, now, **via):
        if not raced and user == alice:
            raced.append(outage[1].pk)
            acknowledge(escalation_id=outage[1].pk, user=bob, now=now)
        return acknowledge(escalation_id=escalation_id, user=user, now=now, **via)

    monkeypatch.setattr(lifecycle_ownership, "acknowledge", bob_acknowledges_the_next_card_meanwhile)
    count, others = ownership.acknowledge_group(group_id=outage[0].group_id, user=alice)
    assert (count, others) == (4, ["bob"])
    assert reload(outage[1]).acknowledged_by == bob
    assert not CardActivity.objects.filter(escalation=outage[1], username="alice").exists()
