"""POST /slack/interactions: Slack's "Acknowledge" button (the Slack app's interactivity request URL).

Only acknowledging happens here; decisions stay in the browser, where the whole card is shown. A
request must carry a valid Slack signature made within 5 minutes (escalations.oncall.slack.verify,
around slack_sdk's SignatureVerifier); anything else is answered 401, changes nothing, and is
counted (SlackRefusal, one row per reason and hour, shown on /system/; counted in memory and
written at most every 10 s, oncall/slack_refusals.py). A signed request is acted on once: the same
request again within the window is an empty 200 that changes nothing (oncall/slack_replays.py).
The clicker is matched to a pollerdash responder by the email Slack has confirmed for them (users.info, bot token with
users:read.email, asked by the Slack app's channel: escalations.oncall.channels.slack_channel); anyone else gets a
reply only they see, and nothing changes. The answer to
Slack is an empty 200 at once; the message is replaced by a worker through the click's
response_url (a notification row like any other, shown on the card).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from escalations.oncall import runs, slack, slack_refusals, slack_replays
from escalations.oncall.channels.slack_channel import users_info
from escalations.roles import can_decide
from operations.decisions import ownership
from operations.decisions.services import TooManyDecisions
from operations.models import Escalation

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    secret = settings.SLACK_SIGNING_SECRET
    if not secret:
        raise Http404("the Slack app is not configured")
    body = request.body
    refusal = slack.verify(signing_secret=secret, body=body, headers=dict(request.headers), now=time.time())
    if refusal is not None:
        # Counted and logged per flush (one line for many), not per request: anyone can post here.
        slack_refusals.count(reason=str(refusal), now=timezone.now())
        return HttpResponse(status=401)
    if not slack_replays.first_delivery(
        timestamp=request.headers["X-Slack-Request-Timestamp"],
        signature=request.headers["X-Slack-Signature"],
        now=timezone.now(),
    ):
        logger.warning("Slack interaction replayed (the same signed request again): answered 200, nothing changed")
        return HttpResponse(status=200)
    click = slack.parse_click(
        body=body,
        team_id=settings.SLACK_TEAM_ID,
        app_id=settings.SLACK_APP_ID,
        test_hosts=frozenset(host.rsplit(":", 1)[0] for host in settings.NOTIFY_ALLOWED_HOSTS),
    )
    if click.kind is not slack.Kind.ACKNOWLEDGE or not click.response_url:
        if click.problem:
            logger.info("Slack interaction ignored: %s", click.problem)
        return HttpResponse(status=200)
    escalation = (
        Escalation.objects.select_related("operation__provider").filter(pk=click.escalation_id).first()
        if click.escalation_id is not None
        else None
    )
    if escalation is None:
        return HttpResponse(status=200)
    now = timezone.now()
    info = users_info(click.slack_user_id)
    email = info.email if isinstance(info, slack.SlackUser) else ""
    accounts = [
        slack.Account(username=u.get_username(), email=u.email, is_active=u.is_active, is_responder=can_decide(u))
        for u in get_user_model().objects.filter(email__iexact=email).prefetch_related("groups")
        if email
    ]
    matched = slack.match_clicker(click=click, info=info, accounts=accounts)
    with transaction.atomic():
        if isinstance(matched, slack.NotMatched):
            runs.reply_to_click(escalation=escalation, response_url=click.response_url, note=matched.message, now=now)
            return HttpResponse(status=200)
        user = get_user_model().objects.get(username=matched.username)
        reply = _acknowledge(escalation=escalation, user=user, identity=slack_identity(click=click, info=info))
        runs.reply_to_click(escalation=escalation, response_url=click.response_url, note=reply, now=now)
    return HttpResponse(status=200)


def slack_identity(*, click: slack.Click, info: slack.SlackUser | str | None) -> str:
    """The Slack identity an act records: "slack:<team>/<user>", the team users.info confirmed."""
    team = info.team_id if isinstance(info, slack.SlackUser) and info.team_id else click.slack_team_id
    return f"slack:{team}/{click.slack_user_id}"


def _acknowledge(*, escalation: Escalation, user: User, identity: str) -> str:
    """Acknowledge as `user`, audited as them (operations.decisions.ownership, the same act as the
    card's button) with the channel and the Slack identity; the reply to the click: "replace" (the
    message then shows the card's state) or words only the clicker sees."""
    try:
        ownership.card_acknowledge(escalation_id=escalation.pk, user=user, channel="slack", channel_identity=identity)
    except ownership.CardNotOpen:
        return "replace"
    except ownership.TakeoverNeeded as exc:
        return f"{exc.holder} holds this card. To take it over, open the card: it asks you to confirm."
    except TooManyDecisions:
        return "You acted on cards too often in the last minute; nothing was changed. Try again shortly."
    logger.info("card %s acknowledged from Slack by %s (%s)", escalation.pk, user, identity)
    return "replace"
