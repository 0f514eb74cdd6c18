"""Time to acknowledge and time to decide: counted once per card in the act's transaction, shown on
/system/ as p50/p95 by reason and provider, exported on /metrics as cumulative histograms."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from prometheus_client.parser import text_string_to_metric_families

from operations import events
from operations.decisions.services import escalation_decide
from operations.models import Escalation
from operations.observability import figures
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


def acknowledge(esc: Escalation, user: object) -> None:
    with transaction.atomic():
        events.card_acknowledged.send(sender=Escalation, escalation=esc, user=user)


def scrape(client) -> dict[str, object]:
    from django.test import override_settings

    with override_settings(METRICS_ALLOW_LOOPBACK=True):
        text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_time_to_acknowledge_is_written_once_and_decide_counts_only_decisions(stopped, clock, alice, client) -> None:
    esc = stopped()
    clock.shift(90)
    acknowledge(esc, alice)
    clock.shift(600)
    acknowledge(esc, alice)  # again (after an unacknowledge): the first response stays
    esc.refresh_from_db()
    assert (esc.first_response_at - esc.opened_at).total_seconds() == 90
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    families = scrape(client)
    ack = families["pollerdash_card_time_to_ack_seconds"]
    decide = families["pollerdash_card_time_to_decide_seconds"]
    by = {(s.name, s.labels.get("le")): s.value for s in ack.samples if s.labels.get("reason") == "deadline_exceeded"}
    assert by[("pollerdash_card_time_to_ack_seconds_bucket", "60.0")] == 0
    assert by[("pollerdash_card_time_to_ack_seconds_bucket", "120.0")] == 1
    assert by[("pollerdash_card_time_to_ack_seconds_bucket", "+Inf")] == 1
    assert by[("pollerdash_card_time_to_ack_seconds_count", None)] == 1
    assert by[("pollerdash_card_time_to_ack_seconds_sum", None)] == 90
    [decided_sum] = [s.value for s in decide.samples if s.name.endswith("_sum")]
    assert decided_sum == 690


def test_a_decision_without_an_acknowledgement_is_the_first_response(stopped, clock, alice) -> None:
    esc = stopped()
    clock.shift(300)
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    esc.refresh_from_db()
    assert esc.first_response_at == esc.closed_at


def test_the_system_panel_shows_percentiles_waiting_cards_and_decisions_per_responder(
    stopped, clock, alice, bob, client
) -> None:
    cards = [stopped() for _ in range(3)]
    for minutes, esc in zip((1, 2, 10), cards, strict=True):
        esc.refresh_from_db()
        clock.move_to(esc.opened_at + timedelta(minutes=minutes), tick=False)
        escalation_decide(
            sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
        )
    waiting = stopped()
    clock.move_to(waiting.opened_at + timedelta(minutes=30), tick=False)
    result = figures.response_figures()
    day = result.tables[("24h", figures.DECIDE, "reason")]["deadline_exceeded"]
    assert (day.samples, day.p50_s, day.waiting) == (3, 120.0, 1)
    assert day.p95_s == pytest.approx(120 + 0.9 * (600 - 120))  # percentile_cont over 60, 120, 600 s
    assert day.oldest_waiting_s == 30 * 60
    assert result.per_responder == [("alice", {"decisions_24h": 3, "decisions_7d": 3})]
    client.force_login(alice)
    page = client.get("/system/").content.decode()
    assert "How long cards wait for a human" in page and "Time to decide, by provider" in page
    assert "1 waiting" not in page and "1, oldest 30 min" in page


def test_decisions_per_responder_count_each_window_and_only_applied_decisions(stopped, clock, alice, bob) -> None:
    """Counted by the database per responder: a decision days old is in the week only, one older
    than a week in neither, and a responder whose only decision is days old has no 24 h figure."""
    for days_until_next, user in ((8, alice), (3, alice), (3, bob), (0, alice)):
        esc = stopped()
        esc.refresh_from_db()
        clock.move_to(esc.opened_at + timedelta(minutes=1), tick=False)
        escalation_decide(
            sign_in=signed_in_now(), escalation_id=esc.pk, user=user, option_id="close", card_version=esc.version
        )
        clock.shift(days_until_next * 86400)
    # Decided 14 (alice), 6 (alice), 3 (bob) and 0 (alice) days before now.
    result = figures.response_figures()
    assert result.per_responder == [("alice", {"decisions_24h": 1, "decisions_7d": 2}), ("bob", {"decisions_7d": 1})]


def test_buckets() -> None:
    assert [figures.bucket_of(s) for s in (0, 30, 31, 86400, 86401)] == ["30", "30", "60", "86400", "+Inf"]


def test_time_to_acknowledge_and_to_decide_per_channel_on_the_panel_and_metrics(
    stopped, clock, alice, bob, client
) -> None:
    from operations.decisions import ownership

    by_pager, by_web = stopped(), stopped()
    by_pager.refresh_from_db()
    clock.move_to(by_pager.opened_at + timedelta(seconds=45), tick=False)
    ownership.card_acknowledge(
        escalation_id=by_pager.pk, user=alice, channel="pagerduty", channel_identity="pagerduty:PALICE"
    )
    clock.shift(300)
    ownership.card_acknowledge(escalation_id=by_web.pk, user=bob)
    clock.shift(60)
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=by_web.pk, user=bob, option_id="close", card_version=by_web.version
    )
    result = figures.response_figures()
    ack = result.tables[("24h", figures.ACK, "channel")]
    assert set(ack) == {"pagerduty", "web"} and ack["pagerduty"].p50_s == 45
    assert set(result.tables[("24h", figures.DECIDE, "channel")]) == {"web"}
    families = scrape(client)
    samples = families["pollerdash_card_time_to_ack_seconds"].samples
    counted = {s.labels["channel"]: s.value for s in samples if s.name.endswith("_count")}
    assert counted == {"pagerduty": 1, "web": 1}
    client.force_login(alice)
    page = client.get("/system/").content.decode()
    assert "Time to acknowledge, by channel" in page and "<tr><td>PagerDuty</td>" in page
    assert "Time to decide, by channel" in page
    with pytest.raises(ValueError, match="unknown channel"):
        ownership.card_acknowledge(escalation_id=by_pager.pk, user=alice, channel="carrier-pigeon")
