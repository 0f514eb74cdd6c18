"""The email channel: a plain ASCII subject, a text part and an HTML part, both with the deep link first.

Why subjects used to print as ``=?utf-8?q?=5Bpollerdash=5D_Decision_needed...?=``: the subject was
joined with an em dash, and one non-ASCII character makes Django encode the whole header as RFC
2047 encoded words, which mail clients decode but a console or a log shows raw. Subjects are made
ASCII here (typographic punctuation mapped to its ASCII twin, accents dropped, anything else
replaced) and hold pollerdash's own words only; bodies stay UTF-8.

What the agent wrote (job id, purpose) comes after pollerdash's link, each on one quoted, capped
line with its links disabled (escalations.agent_text), in both parts; the HTML part escapes every
value and its only link is the card's.
"""

from __future__ import annotations

import smtplib
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from django.conf import settings
from django.core.mail import EmailMultiAlternatives

from escalations.agent_text import quoted
from escalations.oncall.channels.base import Channel, Message, Outcome, Unsendable, Verdict
from escalations.oncall.facts import CardFacts, Notice
from operations.cards.options import human_duration
from operations.notify.kinds import Kind

SUBJECT_MAX = 150
LAST_NOTICE = (
    "This is the last message about this card (NOTIFY_MAX_PER_CARD): it stays in the inbox until someone decides."
)

_ASCII_TWINS = {
    "\u2014": "-",
    "\u2013": "-",
    "\u2012": "-",
    "\u2212": "-",
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u2026": "...",
    "\u00a0": " ",
    "\u202f": " ",
    "\u00d7": "x",
    "\u2192": "->",
    "\u00b7": "-",
    "\u2022": "-",
}


def ascii_subject(text: str, *, limit: int = SUBJECT_MAX) -> str:
    """One line of printable ASCII, at most `limit` characters, nothing encoded."""
    mapped = "".join(_ASCII_TWINS.get(ch, ch) for ch in text)
    # NFKD splits "é" into "e" + a combining accent; the accent is then dropped with the rest.
    plain = "".join(_ascii(ch) for ch in unicodedata.normalize("NFKD", mapped))
    line = " ".join(plain.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _ascii(ch: str) -> str:
    if 0x20 <= ord(ch) < 0x7F:
        return ch
    if ch.isspace():
        return " "
    if unicodedata.combining(ch) or unicodedata.category(ch) == "Cc":
        return ""
    return "?"


@dataclass(frozen=True)
class Email:
    subject: str
    text: str
    html: str


def card_email(message: Message, *, facts: CardFacts) -> Email:
    """The email of a message about a card: the first says "Decision needed", later ones how long it
    waited; a message outside the levels (a card handed to someone, taken over from them, an
    acceptance to confirm) has pollerdash's own head and first sentence. The last message about a
    card (NOTIFY_MAX_PER_CARD) says so."""
    waited = human_duration(message.now - facts.opened_at)
    head = message.head or ("Decision needed" if message.first else f"Still undecided after {waited}")
    what = f"{facts.reason_label} - {facts.provider_slug} ({facts.operation_id})"
    group_line = ""
    if facts.group_size > 1:
        # One message speaks for the whole outage (the group's other cards send none of their own).
        what = f"{facts.group_size} operations: {facts.reason_label} on {facts.provider_account}"
        group_line = (
            f"This card is one of {facts.group_size} open cards of the same outage ({facts.reason_label}, same "
            f"provider account, opened within minutes): see and decide them together at {facts.group_url}"
        )
    opening = message.intro or (
        "pollerdash stopped waiting on a job and a person must decide what happens next."
        if message.first
        else f"This card has waited {waited} for a decision."
    )
    body = _CardBody(
        opening=opening,
        card_url=facts.card_url,
        group_line=group_line,
        rows=_card_rows(facts=facts, now=message.now),
        agent=[
            f"Provider job id (from the agent): {quoted(facts.provider_job_id)}",
            f"Purpose (from the agent): {quoted(facts.purpose) if facts.purpose else '—'}",
        ],
        closing=LAST_NOTICE if message.last else "The card offers bounded options only; nothing is decided by timeout.",
    )
    return Email(subject=ascii_subject(f"[pollerdash] {head}: {what}"), text=body.text(), html=body.html())


def _card_rows(*, facts: CardFacts, now: datetime) -> list[tuple[str, str]]:
    rows = [
        ("Reason", facts.reason_label),
        # Quoted, links disabled, capped (escalations.oncall.facts): it may quote the provider.
        ("Why it stopped", facts.detail),
        ("Operation", facts.operation_id),
        ("Provider", facts.provider_slug),
        ("Requests used", f"{facts.requests_used} of {facts.max_requests}"),
        ("Deadline", _utc(facts.deadline_at)),
        ("Business deadline", _business(facts.business_deadline_at, now)),
        ("Open since", _utc(facts.opened_at)),
    ]
    if facts.option_labels:
        rows.append(("Options", "; ".join(facts.option_labels)))
    return rows


@dataclass(frozen=True)
class _CardBody:
    """What a card's email says, in the order both parts say it: the card's link first, what the
    agent wrote after pollerdash's own words."""

    opening: str
    card_url: str
    group_line: str
    rows: list[tuple[str, str]]
    agent: list[str]  # quoted, links disabled
    closing: str

    def text(self) -> str:
        width = max(len(label) for label, _ in self.rows) + 2
        return "\n".join(
            [
                self.opening,
                "",
                f"Decide on the card: {self.card_url}",
                *([self.group_line] if self.group_line else []),
                "",
                *(f"{label + ':':<{width}} {value}" for label, value in self.rows),
                "",
                "Supplied when the job was registered, not written by pollerdash (links disabled):",
                *self.agent,
                "",
                self.closing,
            ]
        )

    def html(self) -> str:
        cells = "".join(
            f'<tr><th scope="row" align="left" valign="top">{escape(label)}</th><td>{escape(value)}</td></tr>'
            for label, value in self.rows
        )
        return (
            '<!doctype html><html><body><div lang="en">'
            f"<p>{escape(self.opening)}</p>"
            f'<p><a href="{escape(self.card_url, quote=True)}"><strong>Open the card and decide</strong></a></p>'
            + (f"<p>{escape(self.group_line)}</p>" if self.group_line else "")
            + f'<table cellpadding="4">{cells}</table>'
            "<p>Supplied when the job was registered, not written by pollerdash (links disabled):</p>"
            + "".join(f"<p>{escape(line)}</p>" for line in self.agent)
            + f"<p>{escape(self.closing)}</p></div></body></html>"
        )


def _utc(value: datetime | None) -> str:
    return "none" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _business(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "none"
    if value > now:
        return f"{_utc(value)} (in {human_duration(value - now)})"
    return f"{_utc(value)} (passed {human_duration(now - value)} ago)"


def notice_email(notice: Notice) -> Email:
    """A message about no card: pollerdash's words, the operation's link, its facts, the agent's
    words quoted after them."""
    lines = [notice.opening, "", f"Operation: {notice.link}"]
    for paragraph in notice.paragraphs:
        lines += ["", paragraph]
    if notice.facts:
        width = max(len(label) for label, _ in notice.facts) + 2
        lines += ["", *(f"{label + ':':<{width}} {value}" for label, value in notice.facts)]
    if notice.quoted:
        lines += ["", *([notice.quoted_intro] if notice.quoted_intro else []), *notice.quoted]
    text = "\n".join(lines)
    cells = "".join(
        f'<tr><th scope="row" align="left" valign="top">{escape(label)}</th><td>{escape(value)}</td></tr>'
        for label, value in notice.facts
    )
    html = (
        '<!doctype html><html><body><div lang="en">'
        f"<p>{escape(notice.opening)}</p>"
        f'<p><a href="{escape(notice.link, quote=True)}"><strong>Open the operation</strong></a></p>'
        + "".join(f"<p>{escape(paragraph)}</p>" for paragraph in notice.paragraphs)
        + (f'<table cellpadding="4">{cells}</table>' if cells else "")
        + (f"<p>{escape(notice.quoted_intro)}</p>" if notice.quoted and notice.quoted_intro else "")
        + "".join(f"<p>{escape(line)}</p>" for line in notice.quoted)
        + "</div></body></html>"
    )
    return Email(subject=ascii_subject(f"[pollerdash] {notice.subject}"), text=text, html=html)


class EmailChannel(Channel):
    """One email per row (one address), sent by Django's mail backend within EMAIL_TIMEOUT."""

    kind = Kind.EMAIL

    def deliver(self, message: Message) -> Outcome:
        if message.notice is not None:
            email = notice_email(message.notice)
        elif message.card is not None:
            email = card_email(message, facts=message.card)
        else:
            raise Unsendable("an email needs a card or a notice")
        mail = EmailMultiAlternatives(email.subject, email.text, settings.DEFAULT_FROM_EMAIL, [message.address])
        mail.attach_alternative(email.html, "text/html")
        try:
            mail.send()
        except smtplib.SMTPRecipientsRefused:
            return Outcome(Verdict.FAILED, None, "the mail server refused the address")
        except smtplib.SMTPResponseException as exc:
            verdict = Verdict.FAILED if exc.smtp_code >= 500 else Verdict.RETRY
            return Outcome(verdict, None, f"the mail server answered {exc.smtp_code}")
        except (OSError, smtplib.SMTPException) as exc:
            return Outcome(Verdict.RETRY, None, f"mail not sent ({type(exc).__name__})")
        return Outcome(Verdict.SENT, None, "sent")
