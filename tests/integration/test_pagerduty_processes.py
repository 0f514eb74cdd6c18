"""PagerDuty → pollerdash with real processes: a web process (uvicorn) takes the signed v3 webhook,
the dispatcher and a worker run the card's policy. An acknowledgement in PagerDuty stops level 2;
a replay, a tampered body and an oversized one change nothing; a resolve leaves the card open."""

from __future__ import annotations

import httpx
import pytest
from django.utils import timezone

from demo.fakepagerduty import webhook_event, webhook_signature, webhook_user
from operations.models import CardActivity, Escalation, NotificationDelivery
from tests.integration.support import start_web, wait_until
from tests.integration.test_oncall_processes import LEVEL_WAIT_S, mailed, oncall, open_card, receivers  # noqa: F401
from tests.support import CANARY_PD_WEBHOOK

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_acknowledgement_from_pagerduty_stops_level_two_and_a_resolve_leaves_the_card_open(
    oncall,  # noqa: F811
    processes,
) -> None:
    profile, mail, pd, chat, env, started = oncall
    _, web = start_web(
        processes,
        **env,
        ALLOWED_HOSTS="127.0.0.1",
        PAGERDUTY_WEBHOOK_SECRETS=f"old-secret-rotating-out,{CANARY_PD_WEBHOOK}",
        PAGERDUTY_USER_EMAILS="PALICE=alice@example.test,PBOB=bob@example.test",
    )
    esc = open_card(profile)
    wait_until(lambda: pd.events(), timeout=60, what="the level-1 PagerDuty trigger", processes=processes)
    [trigger] = pd.events()
    first = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty")

    body = webhook_event(
        event_type="incident.acknowledged",
        dedup_key=trigger["dedup_key"],
        agent=webhook_user("PALICE", "Alice A."),
        occurred_at=timezone.now(),
    )
    url = f"{web}/pagerduty/webhooks"
    # Signed with the new secret, during a rotation (both signatures sent, as PagerDuty does).
    signature = webhook_signature(body=body, secrets=["old-secret-rotating-out", CANARY_PD_WEBHOOK])
    tampered = body.replace(b"PALICE", b"PBOB")
    assert httpx.post(url, content=tampered, headers={"X-PagerDuty-Signature": signature}).status_code == 401
    assert httpx.post(url, content=body).status_code == 401
    huge = b"x" * (65 * 1024)
    oversized = httpx.post(
        url, content=huge, headers={"X-PagerDuty-Signature": webhook_signature(body=huge, secrets=[CANARY_PD_WEBHOOK])}
    )
    assert oversized.status_code == 413
    assert Escalation.objects.get(pk=esc.pk).acknowledged_by is None

    assert httpx.post(url, content=body, headers={"X-PagerDuty-Signature": signature}).status_code == 200
    card = Escalation.objects.get(pk=esc.pk)
    assert card.acknowledged_by.username == "alice" and card.first_response_channel == "pagerduty"
    wait_until(
        lambda: [e["event_action"] for e in pd.events()] == ["trigger", "acknowledge"],
        timeout=60,
        what="pollerdash's own acknowledge to PagerDuty",
        processes=processes,
    )
    # Level 2 would have gone out LEVEL_WAIT_S after level 1: let that moment pass, then count.
    wait_until(
        lambda: (timezone.now() - first.created_at).total_seconds() > LEVEL_WAIT_S + 2,
        timeout=30,
        what="the level-1 wait to run out",
    )
    assert "bob@example.test" not in mailed(mail)
    assert not NotificationDelivery.objects.filter(escalation=esc, level=1).exists()

    # The same delivery again (PagerDuty's retry or a captured request): nothing more.
    activities = CardActivity.objects.filter(escalation=esc).count()
    assert httpx.post(url, content=body, headers={"X-PagerDuty-Signature": signature}).status_code == 200
    assert CardActivity.objects.filter(escalation=esc).count() == activities

    resolved = webhook_event(
        event_type="incident.resolved",
        dedup_key=trigger["dedup_key"],
        agent=webhook_user("PALICE", "Alice A."),
        occurred_at=timezone.now(),
    )
    sig = webhook_signature(body=resolved, secrets=[CANARY_PD_WEBHOOK])
    assert httpx.post(url, content=resolved, headers={"X-PagerDuty-Signature": sig}).status_code == 200
    card = Escalation.objects.get(pk=esc.pk)
    assert card.state == Escalation.State.OPEN
    assert CardActivity.objects.get(escalation=esc, kind="notice").text == (
        "resolved in PagerDuty by Alice A.; this card still needs a decision"
    )
