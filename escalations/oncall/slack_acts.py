"""What a verified Slack interaction does, as the Slack-matched person: acknowledge, open the
"Review and decide" modal, snooze, or decide from the modal's submission.

Every act is the card's own act through the same services as the dashboard (acknowledging and
snoozing through operations.decisions.ownership; deciding through operations.decisions.services:
the same locks, version check, rate limits, Decision, Authorization and audit entry), done as the
one active pollerdash responder whose email Slack confirmed (`users.info`, team checked). Anyone
else gets words only they see, and nothing changes.

A modal's submission is answered within Slack's 3 seconds with a `response_action`: `update`
(what was decided, or — when the card moved on since the modal opened — the card as it is now,
nothing decided) or `errors` (the reason, next to the option or the comment). The message itself is
updated in place by the card's follow-ups (a Slack-app post: chat.update) and through the
response_url of the click that opened the modal (a webhook post), written with the act.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from escalations.oncall import outbox_rows, slack, slack_modal
from escalations.oncall.channels.slack_channel import users_info, web_api
from escalations.oncall.facts import card_url
from escalations.roles import can_decide
from operations.cards.card import load_card
from operations.cards.options import parse_option_id
from operations.cards.words import snoozed_words
from operations.decisions import ownership, services
from operations.infrastructure import outbound
from operations.models import Escalation
from operations.vocabulary import Channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)
Kind = slack.Kind


@dataclass(frozen=True)
class Answer:
    """What the endpoint answers Slack: an empty 200, or a JSON body (a modal's response_action)."""

    body: dict | None = None


def act(click: slack.Click) -> Answer:
    """Do what a verified interaction asks (parse_click read it); nothing for anything else."""
    if click.kind is Kind.SUBMIT:
        return Answer(submit(click))
    if click.kind not in (Kind.ACKNOWLEDGE, Kind.REVIEW, Kind.SNOOZE) or click.escalation_id is None:
        if click.problem:
            logger.info("Slack interaction ignored: %s", click.problem)
        return Answer()
    escalation = Escalation.objects.select_related("operation__provider").filter(pk=click.escalation_id).first()
    if escalation is None:
        return Answer()
    matched = match(click)
    if isinstance(matched, slack.NotMatched):
        _reply(escalation, click, matched.message)
    elif click.kind is Kind.ACKNOWLEDGE:
        _reply(escalation, click, _acknowledge(escalation=escalation, who=matched))
    elif click.kind is Kind.SNOOZE:
        _reply(escalation, click, _snooze(escalation=escalation, who=matched, minutes=click.minutes))
    else:
        _open_review(escalation=escalation, click=click)
    return Answer()


@dataclass(frozen=True)
class Matched:
    """The responder a Slack user was matched to, and the Slack identity the act records."""

    user: User
    identity: str


def slack_identity(*, click: slack.Click, info: slack.SlackUser | str | None) -> str:
    """The Slack identity an act records: "slack:<team>/<user>", the team users.info confirmed."""
    team = info.team_id if isinstance(info, slack.SlackUser) and info.team_id else click.slack_team_id
    return f"slack:{team}/{click.slack_user_id}"


def match(click: slack.Click) -> Matched | slack.NotMatched:
    """The one active responder whose email Slack confirmed for the clicker (users.info), or why not."""
    info = users_info(click.slack_user_id)
    email = info.email if isinstance(info, slack.SlackUser) else ""
    accounts = [
        slack.Account(username=u.get_username(), email=u.email, is_active=u.is_active, is_responder=can_decide(u))
        for u in get_user_model().objects.filter(email__iexact=email).prefetch_related("groups")
        if email
    ]
    matched = slack.match_clicker(click=click, info=info, accounts=accounts)
    if isinstance(matched, slack.NotMatched):
        return matched
    return Matched(
        user=get_user_model().objects.get(username=matched.username), identity=slack_identity(click=click, info=info)
    )


def _reply(escalation: Escalation, click: slack.Click, note: str) -> None:
    if click.response_url:
        with transaction.atomic():
            outbox_rows.reply_to_click(
                escalation=escalation, response_url=click.response_url, note=note, now=timezone.now()
            )


def _acknowledge(*, escalation: Escalation, who: Matched) -> str:
    """Acknowledge as the matched responder (the card's own act, recorded with the channel and the
    Slack identity); "replace" shows the card's state in the message."""
    user = who.user
    try:
        ownership.card_acknowledge(
            escalation_id=escalation.pk, user=user, channel=Channel.SLACK, channel_identity=who.identity
        )
    except ownership.CardNotOpen:
        return "replace"
    except ownership.TakeoverNeeded as exc:
        return f"{exc.holder} holds this card. To take it over, open the card: it asks you to confirm."
    except services.TooManyDecisions:
        return "You acted on cards too often in the last minute; nothing was changed. Try again shortly."
    logger.info("card %s acknowledged from Slack by %s (%s)", escalation.pk, user, who.identity)
    return "replace"


def _snooze(*, escalation: Escalation, who: Matched, minutes: int) -> str:
    user = who.user
    try:
        snoozed = ownership.card_snooze(
            escalation_id=escalation.pk,
            user=user,
            minutes=minutes,
            channel=Channel.SLACK,
            channel_identity=who.identity,
        )
    except ownership.OwnershipRefused as exc:
        return f"{exc.message} Nothing was changed."
    except services.TooManyDecisions:
        return "You acted on cards too often in the last minute; nothing was changed. Try again shortly."
    assert snoozed.snoozed_until is not None  # just written
    until = snoozed.snoozed_until.strftime("%Y-%m-%d %H:%M UTC")
    return snoozed_words(by=user.get_username(), until=until)


# --- the modal ---------------------------------------------------------------------------------------------


def _open_review(*, escalation: Escalation, click: slack.Click) -> None:
    """views.open with the click's trigger_id (valid 3 s, so sent now, not by a worker)."""
    now = timezone.now()
    if escalation.state != Escalation.State.OPEN:
        _reply(escalation, click, "replace")
        return
    card = load_card(escalation=escalation, operation=escalation.operation, now=now)
    form = slack_modal.Form(
        escalation.pk, escalation.version, click.slack_user_id, click.slack_team_id, click.response_url
    )
    view = slack_modal.review_view(card=card, metadata=slack_modal.sign(form), card_url=card_url(escalation))
    refused = _views_open(trigger_id=click.trigger_id, view=view)
    if refused:
        logger.warning("Slack did not open the decision form for card %s: %s", escalation.pk, refused)
        _reply(escalation, click, f"Slack did not open the decision form ({refused}); open the card instead.")


def _views_open(*, trigger_id: str, view: dict) -> str:
    """ "" when Slack opened the view, else why not. The person waits: purpose slack_lookup."""
    token = settings.SLACK_BOT_TOKEN
    if not token:
        return "no Slack bot token is configured"
    content = json.dumps({"trigger_id": trigger_id, "view": view}).encode()
    answer = web_api("views.open", token=token, content=content, purpose=outbound.Purpose.SLACK_LOOKUP)
    if answer.transport_error is not None or answer.http_status != 200:
        return f"views.open did not answer ({answer.error_type or answer.http_status})"
    try:
        reply = json.loads((answer.body or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "views.open answered something that is not JSON"
    if not isinstance(reply, dict) or not reply.get("ok"):
        return f"views.open refused: {str(reply.get('error') if isinstance(reply, dict) else '')[:100]}"
    return ""


def submit(click: slack.Click) -> dict:
    """The modal's submission: refused unless pollerdash signed its card reference for this very Slack
    user, then decided as the matched responder through the decision service."""
    form = slack_modal.read(click.metadata)
    if form is None or form.slack_user != click.slack_user_id or form.slack_team != click.slack_team_id:
        logger.warning("Slack decision form refused: its card reference is not the one pollerdash signed")
        return _errors("This form was altered or has expired; nothing was decided. Open the card again.")
    escalation = Escalation.objects.select_related("operation__provider").filter(pk=form.escalation_id).first()
    if escalation is None:
        return _errors("This card no longer exists; nothing was decided.")
    parsed = parse_option_id(click.option_id)
    if parsed is None:
        return _errors("Choose one of the options.")
    if not slack_modal.kind_decidable_in_slack(parsed.kind):
        return _errors(
            "This option cannot be undone, so it is decided on the card only, after a fresh sign-in; nothing "
            "was decided here."
        )
    matched = match(click)
    if isinstance(matched, slack.NotMatched):
        return _errors(matched.message)
    try:
        result = decide(escalation=escalation, who=matched, option_id=click.option_id, form=form, comment=click.comment)
    except services.TooManyDecisions as exc:
        return _errors(exc.message)
    if result.stale:
        return _current_state(escalation.pk, form=form)
    if result.refused:
        block = slack.COMMENT_BLOCK if "comment" in result.message.lower() else slack.OPTION_BLOCK
        return {"response_action": "errors", "errors": {block: result.message[:300]}}
    if form.response_url:
        _reply(escalation, _with_url(click, form.response_url), "replace")
    logger.info("card %s decided from Slack by %s: %s", escalation.pk, matched.user, click.option_id)
    return {
        "response_action": "update",
        "view": slack_modal.result_view(text=result.message, card_url=card_url(escalation)),
    }


def decide(
    *, escalation: Escalation, who: Matched, option_id: str, form: slack_modal.Form, comment: str
) -> services.DecideResult:
    """The one call from Slack into the decision service (no browser sign-in: only options that need
    none are ever posted here, and the service refuses the others anyway)."""
    return services.escalation_decide(
        escalation_id=escalation.pk,
        user=who.user,
        sign_in=None,
        option_id=option_id,
        card_version=form.version,
        comment=comment,
        channel=Channel.SLACK,
        channel_identity=who.identity,
    )


def _current_state(escalation_id: int, *, form: slack_modal.Form) -> dict:
    """The card moved on since the modal opened: nothing was decided; the modal shows it as it is now."""
    escalation = Escalation.objects.select_related("operation__provider").get(pk=escalation_id)
    url = card_url(escalation)
    if escalation.state != Escalation.State.OPEN:
        how = escalation.closed_reason or escalation.state
        text = f"Nothing was decided: this card is no longer open ({escalation.state}: {how})."
        return {"response_action": "update", "view": slack_modal.result_view(text=text, card_url=url)}
    card = load_card(escalation=escalation, operation=escalation.operation, now=timezone.now())
    fresh = slack_modal.Form(escalation.pk, escalation.version, form.slack_user, form.slack_team, form.response_url)
    notice = (
        f"The card changed since you opened this form (version {form.version}, now {escalation.version}): "
        "nothing was decided. Here it is as it is now."
    )
    view = slack_modal.review_view(card=card, metadata=slack_modal.sign(fresh), card_url=url, notice=notice)
    return {"response_action": "update", "view": view}


def _errors(text: str) -> dict:
    return {"response_action": "errors", "errors": {slack.OPTION_BLOCK: text[:300]}}


def _with_url(click: slack.Click, response_url: str) -> slack.Click:
    return slack.Click(**{**click.__dict__, "response_url": response_url})
