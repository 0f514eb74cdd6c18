"""POST /pagerduty/webhooks: a PagerDuty v3 webhook subscription's deliveries.

404 unless PAGERDUTY_WEBHOOK_SECRETS is set. A request must carry a `v1=` signature of its raw body
made with one of the subscription's secrets (escalations.oncall.pagerduty_webhooks.verify); anything
else is answered 401, changes nothing, and is counted like Slack's refusals (SlackRefusal rows with
the reason prefixed "pagerduty:", in memory and written at most every 10 s:
oncall/slack_refusals.py). A verified event is acted on once, by its id, whichever web process it
reaches (oncall/pagerduty_replays.py); an event too old to be remembered is refused by its own
occurred_at. What it does to a card is escalations.oncall.pagerduty_acts. Every verified request is
answered 200 with an empty body, also when it changes nothing: PagerDuty retries anything else.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from escalations.oncall import pagerduty_acts, pagerduty_replays, pagerduty_webhooks, slack_refusals
from escalations.oncall.channels.pagerduty import card_of_dedup_key, instance

logger = logging.getLogger(__name__)


@csrf_exempt
@require_POST
def webhooks(request: HttpRequest) -> HttpResponse:
    secrets = settings.PAGERDUTY_WEBHOOK_SECRETS
    if not secrets:
        raise Http404("PagerDuty webhooks are not configured")
    body = request.body
    refusal = pagerduty_webhooks.verify(secrets=secrets, body=body, header=request.headers.get("X-PagerDuty-Signature"))
    if refusal is not None:
        slack_refusals.count(reason=f"{pagerduty_webhooks.REFUSAL_PREFIX}{refusal}", now=timezone.now())
        logger.warning("PagerDuty webhook refused (%s): answered 401, nothing changed", refusal)
        return HttpResponse(status=401)
    now = timezone.now()
    event = pagerduty_webhooks.parse_event(body=body)
    if isinstance(event, str):
        logger.info("PagerDuty webhook ignored: %s", event)
        return HttpResponse(status=200)
    if pagerduty_webhooks.too_old_or_early(event=event, now=now):
        logger.warning(
            "PagerDuty event %s refused: it occurred at %s, outside the replay window", event.id, event.occurred_at
        )
        return HttpResponse(status=200)
    card = card_of_dedup_key(event.incident_key, instance=instance())
    if event.type not in pagerduty_webhooks.ACTED_ON or card is None:
        return HttpResponse(status=200)
    with transaction.atomic():
        if not pagerduty_replays.first_delivery(event_id=event.id, occurred_at=event.occurred_at, now=now):
            logger.warning("PagerDuty event %s replayed: answered 200, nothing changed", event.id)
            return HttpResponse(status=200)
        outcome = pagerduty_acts.act(event=event, escalation_id=card)
    logger.info("PagerDuty %s on card %s by %s: %s", event.type, card, event.agent.identity, outcome)
    return HttpResponse(status=200)
