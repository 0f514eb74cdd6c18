from __future__ import annotations

from django.db import models
from django.db.models import Q


class CallbackDelivery(models.Model):
    """An outbox event for an agent's callback URL (Standard Webhooks).

    Written in the same transaction as the status change it announces; `id` is the stable
    `webhook-id` of every delivery attempt.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # retries exhausted; escalated
        DISABLED = "disabled"  # the receiver answered 410

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, related_name="callbacks")
    event_type = models.CharField(max_length=64)
    sequence = models.BigIntegerField()
    payload = models.BinaryField()
    url = models.CharField(max_length=2048)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "callback deliveries"
        ordering = ["created_at"]
        constraints = [
            # A completion is announced once, however many pollers or redeliveries saw it.
            models.UniqueConstraint(
                fields=["operation"],
                condition=Q(event_type="operation.completed"),
                name="one_completion_event_per_operation",
            ),
            models.UniqueConstraint(fields=["operation", "event_type", "sequence"], name="one_event_per_sequence"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="callback_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.event_type}"


class CallbackEndpoint(models.Model):
    """Delivery state of one callback URL across operations: a 410 disables it for good."""

    url = models.CharField(max_length=2048, unique=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    last_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.url
