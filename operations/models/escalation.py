"""Decision cards (Escalation) and what humans chose on them (Decision): part of the domain, since
the lifecycle opens, supersedes and closes cards in the same transactions that change operations.

The tables keep the names they had when the models lived in the dashboard app (state-only move).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from operations.vocabulary import Reason, choices_of


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
    detail = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    version = models.PositiveIntegerField(default=1)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # HMAC fingerprint of the provider credential when the provider denied it: a retry is offered
    # only once the credential changed.
    credential_fingerprint = models.CharField(max_length=32, blank=True)
    # Facts at the moment pollerdash stopped (HTTP status, provider state, hint...), shown on the card.
    context = models.JSONField(default=dict, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_notified_at = models.DateTimeField(null=True, blank=True)
    notifications_sent = models.PositiveIntegerField(default=0)
    # Notifications not sent because a cap was reached (NOTIFY_MAX_PER_CARD, NOTIFY_MAX_PER_HOUR).
    notifications_skipped = models.PositiveIntegerField(default=0)
    # cancel_at_provider: the one cancel request sent from this card and the provider's answer
    # ({"state", "http_status", "provider_state", "provider_request_id", "detail", "decision_id", "sent_at"}).
    cancel_response = models.JSONField(null=True, blank=True)
    # Why the card closed: the decision that ended it, or what superseded it.
    closed_reason = models.CharField(max_length=300, blank=True)

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
    audit_seq = models.BigIntegerField(null=True, blank=True)
    # How and when the decider had authenticated (operations.decisions.signin.SignIn.as_record():
    # method, at, and the issuer and subject for OpenID Connect); null for decisions recorded
    # before sign-ins were recorded.
    authentication = models.JSONField(null=True, blank=True)
    # A refusal tried again identically (same person, card, option, card version and reason) within
    # DECISION_REPEAT_WINDOW_S of this row is counted here, not recorded again: no new row and no
    # new audit entry, so a stuck or hostile client cannot flood the append-only chain.
    repeat_count = models.PositiveIntegerField(default=0)
    last_repeated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "escalations_decision"
        ordering = ["-decided_at"]
        indexes = [
            models.Index(fields=["decided_at"], name="decision_time_idx"),
            models.Index(fields=["operation", "decided_at"], name="decision_operation_idx"),
            models.Index(fields=["user", "decided_at"], name="decision_user_idx"),
            models.Index(fields=["username", "decided_at"], name="decision_username_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.option} by {self.username or self.user_id} ({self.outcome})"

    def save(self, *args: object, **kwargs: object) -> None:
        # Filled once, from the deciding user, however the row is created.
        if not self.username:
            self.username = self.user.get_username()
        super().save(*args, **kwargs)
