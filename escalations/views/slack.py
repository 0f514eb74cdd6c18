"""POST /slack/interactions: the Slack app's interactivity request URL (Acknowledge, the snooze menu,
"Review and decide" and its modal).

A request must carry a valid Slack signature made within 5 minutes (escalations.oncall.slack.verify,
around slack_sdk's SignatureVerifier); anything else is answered 401, changes nothing, and is
counted (SlackRefusal, one row per reason and hour, shown on /system/; counted in memory and
written at most every 10 s, oncall/slack_refusals.py). A signed request is acted on once: the same
request again within the window is an empty 200 that changes nothing (oncall/slack_replays.py).
What it then does, as the Slack-matched responder, is escalations.oncall.slack_acts: a click is
answered with an empty 200 at once (the message is replaced, or a reply only the clicker sees is
posted, by a worker through the click's response_url); a modal's submission with its
`response_action`.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from escalations.oncall import slack, slack_acts, slack_refusals, slack_replays

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
    answer = slack_acts.act(click)
    if answer.body is not None:
        return JsonResponse(answer.body)
    return HttpResponse(status=200)
