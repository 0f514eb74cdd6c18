"""Decision cards (Escalation) and what humans chose on them (Decision): part of the domain, since
the lifecycle opens, supersedes and closes cards in the same transactions that change operations.

The tables keep the names they had when the models lived in the dashboard app (state-only move).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from operations.vocabulary import CHANNEL_IDENTITY_MAX, Channel, Reason, choices_of


class CardGroup(models.Model):
    """Cards opened for the same provider account and reason within CARD_GROUP_WINDOW_S of the
    group's first card (while one of its cards is still open): one outage, one row in the inbox, one
    notification, and decisions that can be applied to its members at once (BulkDecision)."""

    account = models.CharField(max_length=200)
    reason = models.CharField(max_length=32, choices=choices_of(Reason))
    opened_at = models.DateTimeField()
    # The card that opened the group: the only member that sends its own "opened" notification.
    first_card = models.OneToOneField(
        "operations.Escalation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["account", "reason", "opened_at"], name="card_group_window_idx")]

    def __str__(self) -> str:
        return f"group {self.pk}: {self.reason} on {self.account}"


class Escalation(models.Model):
    """pollerdash stopped waiting on an operation and a human must choose what happens next.

    `version` is the card version: it grows whenever anything shown on the card changes, and a
    decision names the version it was made against, so a stale card cannot be acted on.
    """

    class State(models.TextChoices):
        OPEN = "open"
        DECIDED = "decided"
        # The operation ended another way (agent cancel, provider confirmed) while the card was open.
        SUPERSEDED = "superseded"

    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, related_name="escalations")
    reason = models.CharField(max_length=32, choices=choices_of(Reason))
    # Why it stopped, in pollerdash's words, which may quote the provider (an unknown state it sent):
    # at most 1000 characters (operations.lifecycle.cards.open_card cuts it), whatever it sent.
    detail = models.CharField(max_length=1000)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    version = models.PositiveIntegerField(default=1)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # HMAC fingerprint of the provider credential when the provider denied it: a retry is offered
    # only once the credential changed.
    credential_fingerprint = models.CharField(max_length=32, blank=True)
    # Facts at the moment pollerdash stopped (HTTP status, provider state, hint...), shown on the card.
    context = models.JSONField(default=dict, blank=True)
    # Who holds the card: the responder who acknowledged it, or the one it was handed to.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Who said "I'm on it", and since when: an acknowledged card gets no reminders. A card handed
    # to someone is not acknowledged until they say so themselves.
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    # Who handed the card to its assignee (null when they took it themselves), and when it became theirs.
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # A responder silenced the card's reminders until `snoozed_until` (15 min, 1 h or 4 h, never past
    # the operation's deadline); shown while it is in the future. Written by lifecycle.ownership.snooze.
    snoozed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    snoozed_until = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    notifications_sent = models.PositiveIntegerField(default=0)
    # Notifications not sent because a cap was reached (NOTIFY_MAX_PER_CARD, NOTIFY_MAX_PER_HOUR).
    notifications_skipped = models.PositiveIntegerField(default=0)
    # cancel_at_provider: the one cancel request sent from this card and the provider's answer
    # ({"state", "http_status", "provider_state", "provider_request_id", "detail", "decision_id", "sent_at"}).
    cancel_response = models.JSONField(null=True, blank=True)
    # Why the card closed: the decision that ended it, or what superseded it.
    closed_reason = models.CharField(max_length=300, blank=True)
    # The first acknowledgement, or the closing decision when nobody acknowledged first: written
    # once (operations.observability.figures), the end of "time to acknowledge"; an unacknowledge keeps it.
    first_response_at = models.DateTimeField(null=True, blank=True)
    # Where that first response came from, and where the closing decision came from (web, slack,
    # pagerduty, api): the response figures per channel (operations.observability.figures). Empty before 2.5.
    first_response_channel = models.CharField(max_length=16, blank=True, choices=choices_of(Channel))
    decided_channel = models.CharField(max_length=16, blank=True, choices=choices_of(Channel))
    # The outage this card belongs to (null for cards opened before groups existed).
    group = models.ForeignKey(CardGroup, on_delete=models.PROTECT, null=True, blank=True, related_name="cards")

    class Meta:
        db_table = "escalations_escalation"
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["operation"], condition=Q(state="open"), name="one_open_escalation_per_operation"
            )
        ]
        indexes = [
            models.Index(fields=["state", "opened_at"], name="escalation_state_idx"),
            models.Index(fields=["assignee", "state"], name="escalation_assignee_idx"),
            models.Index(fields=["first_response_at"], name="escalation_first_response_idx"),
            models.Index(fields=["closed_at"], condition=Q(state="decided"), name="escalation_decided_idx"),
            models.Index(fields=["group", "state"], name="escalation_group_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} {self.reason}"


class Decision(models.Model):
    """What a human chose on a card, or tried to choose and was refused; never deleted."""

    class Outcome(models.TextChoices):
        APPLIED = "applied"
        REFUSED = "refused"
        # accept_output: recorded by the first responder, waiting for a second, different one.
        AWAITING_SECOND = "awaiting_second"
        # inspect: recorded, changes nothing.
        RECORDED = "recorded"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="decisions")
    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, related_name="decisions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # The name the user had when deciding, as the audit chain records it: pages and exports show
    # this, so renaming the account later does not rewrite who decided (the `user` link still
    # says which account it was).
    username = models.CharField(max_length=150, editable=False)
    decided_at = models.DateTimeField()
    option = models.CharField(max_length=100)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    refusal_reason = models.CharField(max_length=300, blank=True)
    comment = models.TextField(blank=True)
    card_version = models.PositiveIntegerField(null=True, blank=True)
    card_snapshot = models.JSONField(default=dict, blank=True)
    new_deadline_at = models.DateTimeField(null=True, blank=True)
    new_max_status_requests = models.PositiveIntegerField(null=True, blank=True)
    authorization = models.ForeignKey(
        "operations.Authorization", on_delete=models.PROTECT, null=True, blank=True, related_name="decisions"
    )
    # cancel_at_provider: the provider's answer to the one cancel request (status, request id, excerpt).
    provider_response = models.JSONField(null=True, blank=True)
    # accept_output: the first responder's decision this one confirms.
    confirms = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="confirmed_by"
    )
    # The AuditEntry (pk) that recorded this; its seq comes when the integrator adds it to the tree.
    audit_entry_id = models.BigIntegerField(null=True, blank=True)
    # Taken as one member of a bulk decision over a group (same option and comment for each member).
    bulk = models.ForeignKey(
        "operations.BulkDecision", on_delete=models.PROTECT, null=True, blank=True, related_name="decisions"
    )
    # How and when the decider had authenticated (operations.cards.signin.SignIn.as_record():
    # method, at, and the issuer and subject for OpenID Connect); null for decisions recorded
    # before sign-ins were recorded.
    authentication = models.JSONField(null=True, blank=True)
    # A refusal tried again identically (same person, card, option, card version and reason) within
    # DECISION_REPEAT_WINDOW_S of this row is counted here, not recorded again: no new row and no
    # new audit entry, so a stuck or hostile client cannot flood the append-only chain.
    repeat_count = models.PositiveIntegerField(default=0)
    last_repeated_at = models.DateTimeField(null=True, blank=True)
    # Where the act came from and the identity that channel verified ("slack:T1/U1", "pagerduty:P1";
    # empty on the web, where the signed-in account is the identity). "web" for decisions before 2.5.
    channel = models.CharField(max_length=16, choices=choices_of(Channel), default=Channel.WEB)
    channel_identity = models.CharField(max_length=CHANNEL_IDENTITY_MAX, blank=True)

    class Meta:
        db_table = "escalations_decision"
        ordering = ["-decided_at"]
        indexes = [
            models.Index(fields=["decided_at"], name="decision_time_idx"),
            models.Index(fields=["operation", "decided_at"], name="decision_operation_idx"),
            models.Index(fields=["user", "decided_at"], name="decision_user_idx"),
            models.Index(fields=["username", "decided_at"], name="decision_username_idx"),
            # The inbox asks, for every open card, whether an acceptance awaits a second responder.
            models.Index(fields=["escalation"], condition=Q(outcome="awaiting_second"), name="decision_awaiting_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.option} by {self.username or self.user_id} ({self.outcome})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Filled once, from the deciding user, however the row is created.
        if not self.username:
            self.username = self.user.get_username()
        super().save(*args, **kwargs)


class BulkDecision(models.Model):
    """One option applied to selected cards of a group at once (operations.decisions.bulk).

    Each member applied has its own Decision (linked here), Authorization and audit entry under the
    same comment; this row and its `human.bulk_decision` entry say what was asked, what applied and
    what was refused, member by member. A request refused whole (a closed card, a card of another
    group, one the person may not decide, too many cards) is kept too, with every reason.
    """

    class Outcome(models.TextChoices):
        APPLIED = "applied"  # applied to at least one member (the others, if any, listed as refused)
        REFUSED = "refused"  # refused whole: nothing was applied

    group = models.ForeignKey(CardGroup, on_delete=models.PROTECT, related_name="bulk_decisions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    username = models.CharField(max_length=150)
    decided_at = models.DateTimeField()
    option = models.CharField(max_length=100)
    # The option's label as the members showed it ("Extend 15 min / 4 checks"); empty when refused whole.
    option_label = models.CharField(max_length=200, blank=True)
    comment = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    requested = models.PositiveIntegerField()
    applied = models.PositiveIntegerField(default=0)
    # [{"escalation_id": int | None, "why": str}]: each member refused, or each reason the whole was.
    refused = models.JSONField(default=list, blank=True)
    # The AuditEntry (pk) that recorded this; its seq comes when the integrator adds it to the tree.
    audit_entry_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-decided_at"]

    def __str__(self) -> str:
        return f"bulk {self.option} by {self.username} on group {self.group_id} ({self.outcome})"


class CardActivity(models.Model):
    """What people did on a card that decides nothing: acknowledged it, gave it back, handed it to
    someone, or wrote a note; and what a channel reported on it that changed nothing (a notice: "resolved
    in PagerDuty by X; this card still needs a decision", "no pollerdash account for ..."). Never
    deleted; each row has its audit entry (`human.*`, a notice `oncall.notice`)."""

    class Kind(models.TextChoices):
        ACKNOWLEDGED = "acknowledged"
        UNACKNOWLEDGED = "unacknowledged"
        REASSIGNED = "reassigned"
        NOTE = "note"
        NOTICE = "notice"
        # Reminders silenced until `until` (lifecycle.ownership.snooze).
        SNOOZED = "snoozed"
        # The policy's ack_timeout_s ran out with the card still undecided: the acknowledgement of
        # `user` was withdrawn by pollerdash and the policy started again (lifecycle.ownership.expire).
        ACK_EXPIRED = "ack_expired"

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="activities")
    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, related_name="card_activities")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Null only for a notice, which no pollerdash account wrote.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Names as they were at the time (like Decision.username): a later rename rewrites nothing.
    username = models.CharField(max_length=150)
    at = models.DateTimeField()
    # reassigned: the responder the card was handed to.
    to_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    to_username = models.CharField(max_length=150, blank=True)
    # acknowledged (a take-over) and reassigned: who held the card before.
    previous_username = models.CharField(max_length=150, blank=True)
    # note: the text, plain, length-bounded (operations.lifecycle.notes.NOTE_MAX).
    text = models.TextField(blank=True)
    # snoozed: when reminders resume; ack_expired: when the acknowledgement was given.
    until = models.DateTimeField(null=True, blank=True)
    # The AuditEntry (pk) that recorded this; its seq comes when the integrator adds it to the tree.
    audit_entry_id = models.BigIntegerField(null=True, blank=True)
    # Where the act came from and the identity that channel verified (as on Decision).
    channel = models.CharField(max_length=16, choices=choices_of(Channel), default=Channel.WEB)
    channel_identity = models.CharField(max_length=CHANNEL_IDENTITY_MAX, blank=True)

    class Meta:
        verbose_name_plural = "card activities"
        ordering = ["at", "pk"]
        indexes = [
            models.Index(fields=["escalation", "at"], name="card_activity_card_idx"),
            models.Index(fields=["operation", "at"], name="card_activity_operation_idx"),
            models.Index(fields=["at"], name="card_activity_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.username} on card {self.escalation_id}"
