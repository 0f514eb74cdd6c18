"""The Slack interactivity endpoint's decisions: is the request Slack's, what was clicked, by whom.

Pure: the view (escalations.views.slack) reads the request, the users and Slack's users.info, and
acts on what these functions decide.

Verification uses slack_sdk's SignatureVerifier (HMAC-SHA256 of ``v0:{timestamp}:{body}`` with
the app's signing secret, ``hmac.compare_digest``, a 5-minute window either side). Two things it
leaves to the caller are handled here: a non-numeric timestamp makes it raise ValueError (that
must be a 401, not a 500), and a body that is not UTF-8 makes it raise UnicodeDecodeError. The
clock is injected, so the window is tested without sleeping.

What. `parse_click` reads a block_actions payload (Acknowledge, "Review and decide" with its
trigger_id, the snooze menu) or a view_submission of pollerdash's decision modal (its signed
private_metadata, the option chosen, the comment), from this app and workspace only.

Identity. A block_actions payload names the clicker only as ``user: {id, username, name,
team_id}``; it carries no email. Matching by verified email therefore needs the Web API:
``users.info`` with a bot token holding ``users:read`` and ``users:read.email``, which returns
``user.profile.email`` and ``user.is_email_confirmed``. `match_clicker` decides from that answer:
exactly one active pollerdash account with that confirmed email, or a reply to the clicker alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import parse_qs, urlsplit

from slack_sdk.signature import Clock, SignatureVerifier

from escalations.oncall.channels.slack_blocks import ACK_ACTION_ID, OPEN_ACTION_ID, REVIEW_ACTION_ID, SNOOZE_ACTION_ID

WINDOW_S = 5 * 60
BODY_MAX = 64 * 1024
RESPONSE_URL_HOSTS = frozenset({"hooks.slack.com"})


class Refusal(StrEnum):
    MISSING_TIMESTAMP = "missing_timestamp"
    MISSING_SIGNATURE = "missing_signature"
    BAD_TIMESTAMP = "bad_timestamp"
    STALE_TIMESTAMP = "stale_timestamp"
    BAD_SIGNATURE = "bad_signature"
    NOT_UTF8 = "not_utf8"
    TOO_LARGE = "too_large"


class _FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def verify(*, signing_secret: str, body: bytes, headers: Mapping[str, str], now: float) -> Refusal | None:
    """None when the request is Slack's, else why not (recorded, answered 401, nothing changes)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered.get("x-slack-request-timestamp")
    signature = lowered.get("x-slack-signature")
    if len(body) > BODY_MAX:
        return Refusal.TOO_LARGE
    if not timestamp:
        return Refusal.MISSING_TIMESTAMP
    if not signature:
        return Refusal.MISSING_SIGNATURE
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return Refusal.BAD_TIMESTAMP
    if abs(now - int(timestamp)) > WINDOW_S:
        return Refusal.STALE_TIMESTAMP
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal.NOT_UTF8
    verifier = SignatureVerifier(signing_secret, clock=_FixedClock(now))
    if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
        return Refusal.BAD_SIGNATURE
    return None


# --- what was clicked --------------------------------------------------------------------------------


# The modal's callback_id and its two inputs (escalations.oncall.slack_modal builds it).
DECIDE_CALLBACK_ID = "pollerdash_decide"
OPTION_BLOCK, OPTION_ACTION = "option", "choice"
COMMENT_BLOCK, COMMENT_ACTION = "comment", "text"


class Kind(StrEnum):
    ACKNOWLEDGE = "acknowledge"
    REVIEW = "review"  # "Review and decide": open the modal (trigger_id)
    SNOOZE = "snooze"  # a snooze chosen from the message's menu
    SUBMIT = "submit"  # the modal's view_submission
    OPEN_LINK = "open_link"  # a URL button also sends a payload; it must be answered 200, nothing else
    IGNORED = "ignored"  # another payload type or action: answered 200, nothing changes


@dataclass(frozen=True)
class Click:
    kind: Kind
    escalation_id: int | None
    slack_user_id: str
    slack_team_id: str
    response_url: str
    problem: str = ""  # set when the payload is Slack's but not one pollerdash can act on
    trigger_id: str = ""  # review: what views.open needs (valid 3 s)
    minutes: int = 0  # snooze
    # submit: the modal's private_metadata (pollerdash's signed text, checked by slack_modal), the
    # option chosen and the comment, as posted.
    metadata: str = ""
    option_id: str = ""
    comment: str = ""


def parse_click(*, body: bytes, team_id: str, app_id: str, test_hosts: frozenset[str] = frozenset()) -> Click:
    """Read a verified interaction (form field `payload`, JSON). Never raises on odd input.

    `test_hosts` (the fake Slack receiver's host in tests, like CALLBACK_ALLOWED_HOSTS) may serve
    a response_url over plain http on any port; anything else must be https://hooks.slack.com."""
    empty = Click(Kind.IGNORED, None, "", "", "")
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=False, max_num_fields=20)
        payload = json.loads(fields.get("payload", [""])[0])
    except (UnicodeDecodeError, ValueError):
        return _with(empty, problem="the payload is not JSON")
    if not isinstance(payload, dict) or payload.get("type") not in ("block_actions", "view_submission"):
        return empty
    user = given if isinstance(given := payload.get("user"), dict) else {}
    team = given if isinstance(given := payload.get("team"), dict) else {}
    clicker_team = str(user.get("team_id") or team.get("id") or "")
    base = Click(
        Kind.IGNORED,
        None,
        str(user.get("id") or ""),
        clicker_team,
        _response_url(payload.get("response_url"), test_hosts),
    )
    if app_id and payload.get("api_app_id") != app_id:
        return _with(base, problem="the payload is for another Slack app")
    if team_id and str(team.get("id") or "") != team_id:
        return _with(base, problem="the payload is from another Slack workspace")
    if not base.slack_user_id:
        return _with(base, problem="the payload names no Slack user")
    if payload.get("type") == "view_submission":
        return _submission(base, payload.get("view"))
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
    action_id = action.get("action_id")
    if action_id == OPEN_ACTION_ID:
        return _with(base, kind=Kind.OPEN_LINK)
    if action_id == SNOOZE_ACTION_ID:
        return _snooze(base, action.get("selected_option"))
    if action_id not in (ACK_ACTION_ID, REVIEW_ACTION_ID):
        return base
    value = action.get("value")
    if not _card_id(value):
        return _with(base, problem="the button carries no card id")
    if action_id == ACK_ACTION_ID:
        return _with(base, kind=Kind.ACKNOWLEDGE, escalation_id=int(str(value)))
    trigger = payload.get("trigger_id")
    if not isinstance(trigger, str) or not trigger or len(trigger) > 200:
        return _with(base, problem="the click carries no trigger_id")
    return _with(base, kind=Kind.REVIEW, escalation_id=int(str(value)), trigger_id=trigger)


def _card_id(value: object) -> bool:
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18


def _snooze(base: Click, selected: object) -> Click:
    value = selected.get("value") if isinstance(selected, dict) else None
    card, _, minutes = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not _card_id(card) or not minutes.isascii() or not minutes.isdigit() or len(minutes) > 4:
        return _with(base, problem="the snooze names no card and duration")
    return _with(base, kind=Kind.SNOOZE, escalation_id=int(card), minutes=int(minutes))


def _submission(base: Click, view: object) -> Click:
    """The modal submitted: which card and version (in the signed private_metadata, checked later),
    the option and the comment. The values are read from the view's state, as Slack sends them."""
    if not isinstance(view, dict) or view.get("callback_id") != DECIDE_CALLBACK_ID:
        return _with(base, problem="the view is not pollerdash's decision form")
    metadata = view.get("private_metadata")
    if not isinstance(metadata, str) or not metadata or len(metadata) > 3000:
        return _with(base, problem="the view carries no card")
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    values = values if isinstance(values, dict) else {}
    option = _input(values, OPTION_BLOCK, OPTION_ACTION)
    selected = option.get("selected_option") if isinstance(option.get("selected_option"), dict) else {}
    option_id = selected.get("value") if isinstance(selected, dict) else None
    comment = _input(values, COMMENT_BLOCK, COMMENT_ACTION).get("value")
    return _with(
        base,
        kind=Kind.SUBMIT,
        metadata=metadata,
        option_id=option_id if isinstance(option_id, str) and len(option_id) <= 100 else "",
        comment=comment if isinstance(comment, str) else "",
    )


def _input(values: dict, block_id: str, action_id: str) -> dict:
    block = values.get(block_id)
    element = block.get(action_id) if isinstance(block, dict) else None
    return element if isinstance(element, dict) else {}


def _response_url(value: object, test_hosts: frozenset[str]) -> str:
    """Only Slack's own hosts: pollerdash will POST to it, so it must not point anywhere else."""
    if not isinstance(value, str) or len(value) > 2000:
        return ""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return ""
    if parts.hostname in test_hosts and parts.scheme in ("http", "https"):
        return value
    return value if parts.scheme == "https" and parts.hostname in RESPONSE_URL_HOSTS and not port else ""


def _with(click: Click, **changes: object) -> Click:
    return Click(**{**click.__dict__, **changes})


# --- who clicked --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlackUser:
    """From users.info (bot token with users:read and users:read.email)."""

    id: str
    team_id: str
    deleted: bool
    is_bot: bool
    email: str
    email_confirmed: bool


def parse_users_info(answer: object) -> SlackUser | str:
    """The user, or why not ("missing_scope" says the bot token lacks users:read.email)."""
    if not isinstance(answer, dict):
        return "users.info answered something that is not JSON"
    if not answer.get("ok"):
        return f"users.info refused: {answer.get('error', 'unknown error')}"
    user = answer.get("user")
    if not isinstance(user, dict):
        return "users.info answered without a user"
    profile = given if isinstance(given := user.get("profile"), dict) else {}
    email = profile.get("email")
    return SlackUser(
        id=str(user.get("id") or ""),
        team_id=str(user.get("team_id") or ""),
        deleted=bool(user.get("deleted")),
        is_bot=bool(user.get("is_bot")),
        email=email.strip().lower() if isinstance(email, str) else "",
        # Absent means Slack did not say; only an explicit true counts as verified.
        email_confirmed=user.get("is_email_confirmed") is True,
    )


@dataclass(frozen=True)
class Account:
    username: str
    email: str
    is_active: bool
    is_responder: bool


@dataclass(frozen=True)
class Matched:
    username: str
    via: str  # "email"


@dataclass(frozen=True)
class NotMatched:
    """Answered with an ephemeral message only the clicker sees; nothing changes."""

    message: str


def match_clicker(*, click: Click, info: SlackUser | str | None, accounts: Sequence[Account]) -> Matched | NotMatched:
    """Which pollerdash user clicked: exactly one active account whose email is the Slack account's
    confirmed email (`accounts`: the accounts with that email, any case). Ambiguity is refused,
    never guessed."""
    if info is None:
        return NotMatched(
            "pollerdash cannot look up your Slack email (no Slack bot token is configured). "
            "Acknowledge on the card instead."
        )
    if isinstance(info, str):
        return NotMatched(f"pollerdash could not check who you are right now ({info}). Use the card instead.")
    if info.id != click.slack_user_id or (click.slack_team_id and info.team_id and info.team_id != click.slack_team_id):
        return NotMatched("Slack answered for a different user; nothing was changed.")
    if info.deleted or info.is_bot:
        return NotMatched("This Slack account cannot act in pollerdash.")
    if not info.email or not info.email_confirmed:
        return NotMatched("Your Slack account has no confirmed email address, so pollerdash cannot match it.")
    same = [a for a in accounts if a.email.strip().lower() == info.email and a.is_active]
    if not same:
        return NotMatched("There is no pollerdash account for you (none uses your Slack email address).")
    if len(same) > 1:
        return NotMatched("Several pollerdash accounts use your email address; acknowledge on the card instead.")
    if not same[0].is_responder:
        return NotMatched(f"Your pollerdash account ({same[0].username}) can read cards but not acknowledge them.")
    return Matched(same[0].username, "email")
